/* The floor for bench_reader.py: the same syscalls the swtel reader issues, in a
 * minimal C loop with no Python around them. Prints median microseconds per poll.
 *
 * usage: floor ITERATIONS IFNAME...
 *   netdev: one RTM_GETSTATS (IFLA_STATS_LINK_64) dump of every link
 *   ethtool: one ETHTOOL_GSTATS ioctl per named port (string counts read once)
 */
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long netdev_dump(int fd, uint32_t seq, uint64_t *sink)
{
    struct {
        struct nlmsghdr nh;
        struct if_stats_msg ifsm;
    } req = {0};
    static char buf[65536];
    long links = 0;
    req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(struct if_stats_msg));
    req.nh.nlmsg_type = RTM_GETSTATS;
    req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.nh.nlmsg_seq = seq;
    req.ifsm.filter_mask = IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64);
    send(fd, &req, req.nh.nlmsg_len, 0);
    for (;;) {
        ssize_t len = recv(fd, buf, sizeof(buf), 0);
        if (len <= 0)
            return -1;
        for (struct nlmsghdr *nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, (size_t)len);
             nh = NLMSG_NEXT(nh, len)) {
            if (nh->nlmsg_type == NLMSG_DONE)
                return links;
            if (nh->nlmsg_type == NLMSG_ERROR)
                return -1;
            struct if_stats_msg *m = NLMSG_DATA(nh);
            struct rtattr *rta = (struct rtattr *)((char *)m + NLMSG_ALIGN(sizeof(*m)));
            if (RTA_PAYLOAD(rta) >= 8)
                *sink += ((uint64_t *)RTA_DATA(rta))[0];
            links++;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    int iters = atoi(argv[1]), nports = argc - 2;
    int nl = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
    int ioc = socket(AF_INET, SOCK_DGRAM, 0);
    double *t = calloc((size_t)iters, sizeof(double));
    uint32_t *counts = calloc((size_t)nports, sizeof(uint32_t));
    uint64_t sink = 0;
    struct ifreq ifr;
    size_t most = 0;
    for (int p = 0; p < nports; p++) {
        struct ethtool_drvinfo drv = {.cmd = ETHTOOL_GDRVINFO};
        memset(&ifr, 0, sizeof(ifr));
        strncpy(ifr.ifr_name, argv[2 + p], IFNAMSIZ - 1);
        ifr.ifr_data = (void *)&drv;
        if (ioctl(ioc, SIOCETHTOOL, &ifr) == 0)
            counts[p] = drv.n_stats;
        if (counts[p] > most)
            most = counts[p];
    }
    struct ethtool_stats *es = malloc(sizeof(*es) + (most * 2 + 4096) * 8);

    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        netdev_dump(nl, (uint32_t)i + 1, &sink);
        t[i] = now_us() - t0;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp);
    printf("netdev_us %.2f\n", t[iters / 2]);

    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        for (int p = 0; p < nports; p++) {
            memset(&ifr, 0, sizeof(ifr));
            strncpy(ifr.ifr_name, argv[2 + p], IFNAMSIZ - 1);
            es->cmd = ETHTOOL_GSTATS;
            es->n_stats = counts[p];
            ifr.ifr_data = (void *)es;
            if (ioctl(ioc, SIOCETHTOOL, &ifr) == 0 && counts[p])
                sink += es->data[0];
        }
        t[i] = now_us() - t0;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp);
    printf("ethtool_us %.2f\n", t[iters / 2]);
    fprintf(stderr, "(sink %llu)\n", (unsigned long long)sink);
    return 0;
}
