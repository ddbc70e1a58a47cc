#!/bin/bash
# Packaging checks for CI (Debian 12, as root): build the .deb from a clean copy
# of the tree, lintian, local apt repository and apt-get install (also from a
# checkout under a 0700 directory, which apt's _apt user cannot enter), validate
# the shipped config, run the installed agent as user swtel with Debian's python3
# against veth ports in a network namespace with the installed "swtel collect"
# receiving dial-out, query "swtel status" over the socket, systemd-analyze
# verify both units, and purge. Exits non-zero if any check fails.
#
#   packaging/ci-test.sh            # everything
#   SWTEL_CI_KEEP=1 packaging/ci-test.sh   # leave swtel installed at the end
set -uo pipefail

PATH=/usr/sbin:/usr/bin:/sbin:/bin   # Debian's python3 and tools, not a venv's
export PATH DEBIAN_FRONTEND=noninteractive
here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/packaging/out"
tmp=$(mktemp -d /tmp/swtel-ci.XXXXXX)
chmod 0755 "$tmp"                    # the swtel user reads the test config here
suffix=$(printf '%04x%02x' "$RANDOM" "$((RANDOM % 256))")
ns_agent="swtci-a-$suffix" ns_peer="swtci-p-$suffix"
port_a="swta$suffix" port_p="swtp$suffix"   # 14 chars: under IFNAMSIZ
passed=0 failed=0
agent_pid="" collector_pid=""
t_start=$(date +%s)

log() { printf '\n=== %s\n' "$*"; }
pass() { passed=$((passed + 1)); printf 'PASS: %s\n' "$*"; }
fail() { failed=$((failed + 1)); printf 'FAIL: %s\n' "$*" >&2; }
# check NAME CMD...: run CMD, count it, show its output on failure.
check() {
	local name=$1; shift
	if "$@" >"$tmp/step.log" 2>&1; then
		pass "$name"
	else
		fail "$name (exit $?)"; sed 's/^/    /' "$tmp/step.log" >&2
	fi
}

cleanup() {
	for pid in $agent_pid $collector_pid; do
		kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	done
	ip netns del "$ns_agent" 2>/dev/null
	ip netns del "$ns_peer" 2>/dev/null
	"$here/packaging/make-apt-repo.sh" --remove 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

need_root() { [ "$(id -u)" = 0 ] || { echo "ci-test: must run as root" >&2; exit 2; }; }
need_root

# ------------------------------------------------------------------ build deps
log "build dependencies (apt-get build-dep ./)"
t0=$(date +%s)
# A fresh machine (or container) may have no package lists yet.
if ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1; then apt-get update -q >"$tmp/apt.log" 2>&1; fi
if apt-get install -y -q --no-install-recommends dpkg-dev build-essential lintian \
		apt-utils iproute2 util-linux man-db iputils-ping strace >"$tmp/apt.log" 2>&1 &&
	(cd "$here" && apt-get build-dep -y -q ./) >>"$tmp/apt.log" 2>&1; then
	pass "build dependencies installed ($(($(date +%s) - t0)) s)"
else
	fail "installing build dependencies"; tail -30 "$tmp/apt.log" >&2
	echo "0 passed, 1 failed"; exit 1
fi

# ----------------------------------------------------------------------- build
log "build the .deb from a clean copy (packaging/build-deb.sh)"
t0=$(date +%s)
if "$here/packaging/build-deb.sh" >"$tmp/build.log" 2>&1; then
	pass "dpkg-buildpackage ($(($(date +%s) - t0)) s)"
else
	fail "dpkg-buildpackage"; tail -40 "$tmp/build.log" >&2
	echo "$passed passed, $failed failed"; exit 1
fi
deb=$(ls "$out"/swtel_*.deb | head -1)
echo "--- dpkg -c $(basename "$deb")"
dpkg -c "$deb"
echo "--- dpkg -I (control)"
dpkg-deb -f "$deb" Package Version Architecture Depends Recommends

# --------------------------------------------------------------------- lintian
log "lintian"
lintian -I --pedantic --show-overrides --fail-on error "$out"/swtel_*.changes >"$tmp/lintian.log" 2>&1
rc=$?
cat "$tmp/lintian.log"
if [ $rc = 0 ]; then pass "lintian: no errors"; else fail "lintian reported errors (exit $rc)"; fi

# ------------------------------------------------------------ repo and install
log "local apt repository and apt-get install swtel"
if dpkg -s swtel >/dev/null 2>&1; then apt-get purge -y -q swtel >/dev/null 2>&1; fi
check "make-apt-repo.sh" "$here/packaging/make-apt-repo.sh"
check "apt-get install swtel (from the local repository)" apt-get install -y -q swtel
apt-cache policy swtel | sed 's/^/    /'
check "installed version comes from the file: repository" \
	sh -c "apt-cache policy swtel | grep -q 'file:'"

# apt reads a file: repository as its _apt user, who cannot enter a checkout
# under /root or a 0700 "mktemp -d": make-apt-repo.sh must still give a source
# apt can use (it publishes a world-readable copy), whatever the checkout of
# this run. A checkout of the repo script and the .deb, under a 0700 directory:
log "local apt repository from a checkout under a 0700 directory"
closed_src=""
closed_checkout_repo() {
	local co="$tmp/closed/swtel" line
	install -d -m 0700 "$tmp/closed" && mkdir -p "$co/packaging/out" &&
		cp "$here/packaging/make-apt-repo.sh" "$co/packaging/" && cp "$deb" "$co/packaging/out/" || return 1
	ls -ld "$tmp/closed"
	"$here/packaging/make-apt-repo.sh" --remove
	"$co/packaging/make-apt-repo.sh" || { echo "make-apt-repo.sh failed"; return 1; }
	line=$(cat /etc/apt/sources.list.d/swtel-local.list) || return 1
	echo "source: $line"
	closed_src=${line#*file:}; closed_src=${closed_src%% *}
	case $closed_src in "$tmp/closed"/*) echo "the source points into the closed checkout"; return 1 ;; esac
	setpriv --reuid=_apt --regid="$(id -g _apt)" --clear-groups -- test -r "$closed_src/Packages" ||
		{ echo "user _apt cannot read $closed_src/Packages"; return 1; }
}
check "make-apt-repo.sh from a checkout under a 0700 directory: a source user _apt can read" closed_checkout_repo
install_from_closed() {
	[ -n "$closed_src" ] || { echo "no source from the previous check"; return 1; }
	apt-get purge -y -q swtel && apt-get install -y -q swtel || return 1
	apt-cache policy swtel
	apt-cache policy swtel | grep -qF "file:$closed_src ./" || { echo "not installable from file:$closed_src"; return 1; }
	dpkg -s swtel | grep -q '^Status: install ok installed'
}
check "apt-get purge, then apt-get install swtel from that source" install_from_closed
removed_closed() {
	[ -n "$closed_src" ] || { echo "no source from the first check"; return 1; }
	"$tmp/closed/swtel/packaging/make-apt-repo.sh" --remove || return 1
	[ ! -e /etc/apt/sources.list.d/swtel-local.list ] || { echo "apt source left behind"; return 1; }
	[ ! -e "$closed_src" ] || { echo "published copy $closed_src left behind"; return 1; }
}
check "make-apt-repo.sh --remove drops the source and the published copy" removed_closed

log "installed files"
check "/usr/bin/swtel validate /etc/swtel/swtel.yaml" /usr/bin/swtel validate /etc/swtel/swtel.yaml
check "/etc/swtel/swtel.yaml is a conffile" sh -c "dpkg-query -W -f='\${Conffiles}' swtel | grep -q ' /etc/swtel/swtel.yaml '"
check "system user and group swtel exist" sh -c "getent passwd swtel && getent group swtel"
check "C extension loads under Debian's python3 (swtel --version says reader: C)" \
	sh -c "/usr/bin/swtel --version | tee /dev/stderr | grep -q 'reader: C'"
check "vendored pygnmi messages import with Debian's protobuf/grpcio" \
	/usr/bin/python3 -c 'import sys; sys.path[:0] = ["/usr/lib/swtel/vendor"]; from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc; import google.protobuf, grpc; assert google.protobuf.__file__.startswith("/usr/lib/python3/dist-packages"), google.protobuf.__file__; print("protobuf", google.protobuf.__version__, "grpcio", grpc.__version__)'
all_modules_installed() {  # a new subpackage missing from pyproject.toml shows here
	local f missing=0
	for f in $(cd "$here" && git ls-files 'agent/*.py'); do
		[ -e "/usr/lib/swtel/$f" ] || { echo "not installed: $f"; missing=1; }
	done
	return $missing
}
check "every agent/**/*.py of the tree is installed" all_modules_installed
check "nothing installed into dist-packages" sh -c "! dpkg -L swtel | grep -E 'dist-packages|site-packages'"

# --------------------------------------------------------- systemd unit check
log "systemd-analyze verify"
verify_unit() {  # a unit (or template instance) must verify without any message
	local msgs
	msgs=$(systemd-analyze verify "$@" 2>&1)
	local rc=$?
	printf '%s\n' "$msgs"
	[ $rc = 0 ] && [ -z "$msgs" ]
}
check "systemd-analyze verify swtel.service" verify_unit /lib/systemd/system/swtel.service
# A template verifies as an instance; mgmt is the instance Cumulus uses.
check "systemd-analyze verify swtel@.service (as swtel@mgmt.service)" verify_unit swtel@mgmt.service
check "units are not enabled by the install" sh -c "! ls /etc/systemd/system/*.wants/swtel* 2>/dev/null"
# The devlink capability drop-ins: shipped disabled; enabled as docs/devlink.md says, each
# unit must still verify, and grant CAP_NET_ADMIN (bounding and ambient sets) and nothing else.
check "devlink drop-ins installed, not enabled" sh -c \
	"test -f /usr/share/swtel/systemd/devlink-caps.conf && test -f /usr/share/swtel/systemd/devlink-caps@.conf && ! ls -d /etc/systemd/system/swtel*.service.d 2>/dev/null"
granted() {  # the capability findings of systemd-analyze security that are exposed
	systemd-analyze security --offline=yes --no-pager "$1" 2>&1 |
		grep -oE '✗ (CapabilityBoundingSet=~CAP_[A-Z_()|]+|AmbientCapabilities=)' | sort
}
verify_dropin() {  # $1 unit (instance), $2 drop-in directory, $3 packaged drop-in, $4 what it adds
	local dir=/etc/systemd/system/$2 before after rc=0
	before=$(granted "$1")
	mkdir -p "$dir" && cp "$3" "$dir/devlink-caps.conf" || return 1
	verify_unit "$1" || rc=1
	after=$(granted "$1")
	rm -rf "$dir"
	printf 'added: %s\n' "$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | tr '\n' ' ')"
	[ "$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | tr '\n' ' ')" = "$4" ] || rc=1
	[ -z "$(comm -23 <(printf '%s\n' "$before") <(printf '%s\n' "$after"))" ] || rc=1
	return $rc
}
check "swtel.service + devlink-caps.conf verifies and adds CAP_NET_ADMIN only" verify_dropin \
	swtel.service swtel.service.d /usr/share/swtel/systemd/devlink-caps.conf \
	"✗ AmbientCapabilities= ✗ CapabilityBoundingSet=~CAP_NET_ADMIN "
check "swtel@mgmt.service + devlink-caps@.conf verifies and adds the ambient CAP_NET_ADMIN only" verify_dropin \
	swtel@mgmt.service swtel@.service.d /usr/share/swtel/systemd/devlink-caps@.conf "✗ AmbientCapabilities= "

# ------------------------------------------------------- run the installed agent
log "run the installed agent as user swtel against veth ports, with swtel collect"
run_agent_check() {
	ip netns add "$ns_agent" && ip netns add "$ns_peer" || return 1
	ip -n "$ns_agent" link set lo up
	ip -n "$ns_agent" link add "$port_a" type veth peer name "$port_p" netns "$ns_peer" || return 1
	ip -n "$ns_agent" addr add 198.18.0.1/30 dev "$port_a"
	ip -n "$ns_peer" addr add 198.18.0.2/30 dev "$port_p"
	ip -n "$ns_agent" link set "$port_a" up && ip -n "$ns_peer" link set "$port_p" up || return 1

	local port
	port=$(ip netns exec "$ns_agent" /usr/bin/python3 -c \
		'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	cat >"$tmp/swtel-ci.yaml" <<-EOF
	target: ci-$suffix
	interval: 100ms
	sources:
	  netdev: {interfaces: ["$port_a"]}
	  ethtool: {interfaces: ["$port_a"]}
	  rdma: {enabled: false}
	  system: {interval: 1s}
	exporters:
	  dialout:
	    - {name: c1, address: "127.0.0.1:$port", insecure: true}
	  jsonl: {path: /var/log/swtel/ci.jsonl}
	control: {socket: /run/swtel/swtel.sock, mode: "0660", group: swtel}
	log: {level: info, format: kv}
	EOF
	chmod 0644 "$tmp/swtel-ci.yaml"
	# What systemd's RuntimeDirectory=, StateDirectory= and LogsDirectory= make for User=swtel.
	install -d -o swtel -g swtel -m 0750 /run/swtel /var/lib/swtel /var/log/swtel

	ip netns exec "$ns_agent" /usr/bin/swtel collect --listen "127.0.0.1:$port" --insecure \
		-o "$tmp/collected.jsonl" --duration 30 >"$tmp/collector.log" 2>&1 &
	collector_pid=$!
	for _ in $(seq 50); do
		ip netns exec "$ns_agent" /usr/bin/python3 -c \
			"import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break
		sleep 0.1
	done

	# ip netns exec and setpriv exec in place: $! is the agent itself.
	ip netns exec "$ns_agent" /usr/bin/setpriv --reuid=swtel --regid=swtel --init-groups \
		--inh-caps=-all -- /usr/bin/swtel run -c "$tmp/swtel-ci.yaml" --duration 8 \
		>"$tmp/agent.log" 2>&1 &
	agent_pid=$!

	local answered=no
	for _ in $(seq 60); do
		if setpriv --reuid=swtel --regid=swtel --init-groups /usr/bin/swtel status \
			--socket /run/swtel/swtel.sock --json >"$tmp/status.json" 2>"$tmp/status.err"; then
			answered=yes; break
		fi
		# exit 1 = unhealthy but answered (e.g. dial-out not yet connected): retry
		sleep 0.2
	done
	# Known traffic on the watched port after the first snapshot.
	ip netns exec "$ns_peer" ping -q -c 20 -i 0.05 -s 200 198.18.0.1 >"$tmp/ping.log" 2>&1
	sleep 1.5
	setpriv --reuid=swtel --regid=swtel --init-groups /usr/bin/swtel status \
		--socket /run/swtel/swtel.sock --json >"$tmp/status.json" 2>"$tmp/status.err" && answered=yes

	echo "agent process: $(grep -E '^(Uid|CapEff|CapBnd|CapPrm)' /proc/$agent_pid/status 2>/dev/null | tr '\n\t' '  ')"
	grep -qE '^Uid:\s+'"$(id -u swtel)"'\s' /proc/$agent_pid/status &&
		grep -qE '^CapEff:\s+0+$' /proc/$agent_pid/status || { echo "agent not running as swtel without capabilities"; return 1; }

	wait "$agent_pid"; local agent_rc=$?; agent_pid=""
	kill "$collector_pid" 2>/dev/null; wait "$collector_pid" 2>/dev/null; collector_pid=""
	echo "--- agent log (tail)"; tail -15 "$tmp/agent.log"
	echo "--- collector log (tail)"; tail -5 "$tmp/collector.log"
	[ "$agent_rc" = 0 ] || { echo "agent exited with $agent_rc"; return 1; }
	[ "$answered" = yes ] || { echo "swtel status never answered:"; cat "$tmp/status.err"; return 1; }

	/usr/bin/python3 - "$tmp/collected.jsonl" "$tmp/status.json" "$port_a" "ci-$suffix" <<-'EOF'
	import json, sys
	collected, status_file, port, target = sys.argv[1:]
	lines = [json.loads(l) for l in open(collected) if l.strip()]
	ours = [l for l in lines if "path" in l and port in l["path"] and l.get("target") == target]
	stamps = sorted({l["ts"] for l in ours})
	print(f"collector: {len(lines)} lines, {len(ours)} updates for {port}, {len(stamps)} distinct timestamps")
	for l in ours[:3]:
	    print("  e.g.", json.dumps(l))
	assert ours, f"no update for {port} from target {target} reached the collector"
	assert len(stamps) >= 2, "only the initial snapshot arrived: the ping traffic was not streamed"
	status = json.load(open(status_file))
	print("status: version", status.get("version"), "backend", status.get("backend"),
	      "sources", sorted(status.get("sources") or {}), "exporters", sorted(status.get("exporters") or {}))
	assert status.get("backend") == "C", f"installed agent did not load the C extension: {status.get('backend')}"
	assert "dialout:c1" in (status.get("exporters") or {}), "status lists no dial-out exporter c1"
	logged = sum(1 for l in open("/var/log/swtel/ci.jsonl") if port in l)
	print(f"jsonl exporter: {logged} lines for {port} in /var/log/swtel/ci.jsonl")
	assert logged, "the jsonl exporter wrote nothing to the LogsDirectory"
	EOF
}
t0=$(date +%s)
if run_agent_check >"$tmp/run.log" 2>&1; then
	cat "$tmp/run.log"; pass "installed agent as swtel: data reached swtel collect, swtel status answered ($(($(date +%s) - t0)) s)"
else
	cat "$tmp/run.log" >&2; fail "installed agent run"
	[ -f "$tmp/agent.log" ] && { echo "--- agent log" >&2; cat "$tmp/agent.log" >&2; }
fi

# The installed package's main job without a switch: swtel demo runs the simulated
# fabric (the sim ASIC plugin built into the .deb), one agent per device, with
# Debian's python3 and libraries, as an unprivileged user.
installed_demo() {
	install -d -o swtel -g swtel -m 0750 "$tmp/demo"
	setpriv --reuid=swtel --regid=swtel --init-groups --inh-caps=-all -- \
		/usr/bin/swtel demo --duration 16 --no-tui --dir "$tmp/demo" >"$tmp/demo.out" 2>&1
	local rc=$?
	cat "$tmp/demo.out"
	[ $rc = 0 ] || { echo "swtel demo exited $rc"; return 1; }
	grep -E 'spine-1 +swp11s1 +symbol-ber' "$tmp/demo.out" >/dev/null || { echo "no symbol-ber on swp11s1"; return 1; }
	grep -E 'leaf-3 +swp62 +imbalance' "$tmp/demo.out" >/dev/null || { echo "no imbalance on swp62"; return 1; }
	ls /usr/lib/swtel/agent/asic/sim_plugin*.so /usr/lib/swtel/agent/asic/swtel_asic.h
	# the plugin's helper process, in C: this build's (proxy.py runs it only then)
	local version
	version=$(/usr/bin/python3 -c 'import sys; sys.path.insert(0, "/usr/lib/swtel"); import agent; print(agent.__version__)')
	/usr/lib/swtel/agent/asic/swtel-asic-host --version | grep -x "swtel-asic-host $version protocol 1"
}
check "installed swtel demo (simulated fabric, Debian's python3, user swtel) shows both field cases" installed_demo

# OTLP export (exporters.otlp) with the carried opentelemetry-proto 1.27.0 on Debian's
# protobuf 3.21 and grpcio 1.51: the installed agent, as user swtel, on the simulated
# switch, to a receiver built on opentelemetry-proto's service (tests/otlp_receiver.py,
# also on Debian's python3), in both profiles.
installed_otlp() {
	local profile port
	for profile in cumulus otel; do
		port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
		cat >"$tmp/otlp-$profile.yaml" <<-EOF
		target: ci-otlp
		interval: 100ms
		sources:
		  netdev: {enabled: false}
		  ethtool: {enabled: false}
		  system: {enabled: false}
		  asic: {enabled: true, plugin: sim, config: "role=leaf seed=1"}
		exporters:
		  otlp: {endpoint: "127.0.0.1:$port", insecure: true, interval: 500ms, profile: $profile}
		control: {enabled: false}
		EOF
		chmod 0644 "$tmp/otlp-$profile.yaml"
		PYTHONPATH=/usr/lib/swtel/vendor /usr/bin/python3 "$here/tests/otlp_receiver.py" \
			--listen "127.0.0.1:$port" --output "$tmp/otlp-$profile.jsonl" --duration 8 &
		local rx=$!
		sleep 1
		setpriv --reuid=swtel --regid=swtel --init-groups --inh-caps=-all -- \
			/usr/bin/swtel run -c "$tmp/otlp-$profile.yaml" --duration 5 >"$tmp/otlp-agent.log" 2>&1 ||
			{ cat "$tmp/otlp-agent.log"; kill $rx; return 1; }
		wait $rx || { echo "receiver failed"; return 1; }
		/usr/bin/python3 - "$tmp/otlp-$profile.jsonl" "$profile" <<-'PY' || { cat "$tmp/otlp-agent.log"; return 1; }
		import json, sys
		points = [json.loads(line) for line in open(sys.argv[1])]
		profile = sys.argv[2]
		octets = [p for p in points if p["name"] == "nvswitch_interface_ether_stats_octets"
		          and p["attrs"] == {"interface": "swp1"}]
		print(f"{profile}: {len(points)} points, {len({p['name'] for p in points})} names, "
		      f"{len(octets)} of swp1's ether_stats_octets, resource {points[0]['resource'] if points else None}")
		assert len(octets) >= 3, "fewer than 3 exports of swp1's octets"
		kind = ("gauge", "as_double") if profile == "cumulus" else ("sum", "as_int")
		assert all((p["kind"], p["value_type"]) == kind for p in octets), octets[0]
		assert [p["value"] for p in octets] == sorted(p["value"] for p in octets) and octets[-1]["value"] > 0
		assert octets[0]["resource"]["swtel.target"] == "ci-otlp"
		assert any(p["name"] == "nvswitch_interface_sp_rx_pause" and p["attrs"].get("priority") == "3" for p in points)
		PY
	done
	/usr/bin/python3 -c 'import sys; sys.path[:0] = ["/usr/lib/swtel/vendor"]; import google.protobuf, opentelemetry.proto; assert google.protobuf.__file__.startswith("/usr/lib/python3/dist-packages"); assert opentelemetry.proto.__file__.startswith("/usr/lib/swtel/vendor/"); print("protobuf", google.protobuf.__version__, "opentelemetry-proto from", opentelemetry.proto.__file__)'
}
check "installed agent's OTLP export (carried opentelemetry-proto 1.27.0, Debian's protobuf), both profiles" installed_otlp

# systemd is not PID 1 here, so the unit's seccomp filter cannot run for real:
# trace the installed agent instead and evaluate its syscalls against the
# unit's SystemCallFilter= lines (packaging/syscall-check.py).
syscall_check() {
	local port
	port=$(ip netns exec "$ns_agent" /usr/bin/python3 -c \
		'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') || return 1
	sed -i "s/127.0.0.1:[0-9]*/127.0.0.1:$port/" "$tmp/swtel-ci.yaml"
	ip netns exec "$ns_agent" /usr/bin/swtel collect --listen "127.0.0.1:$port" --insecure \
		-o /dev/null --duration 20 >/dev/null 2>&1 &
	collector_pid=$!
	sleep 1
	ip netns exec "$ns_agent" strace -f -qq -o "$tmp/agent.strace" /usr/bin/setpriv --reuid=swtel \
		--regid=swtel --init-groups --inh-caps=-all -- /usr/bin/swtel run -c "$tmp/swtel-ci.yaml" \
		--duration 4 >"$tmp/agent-strace.log" 2>&1 &
	agent_pid=$!
	sleep 2
	ip netns exec "$ns_peer" ping -q -c 5 -i 0.05 198.18.0.1 >/dev/null 2>&1
	setpriv --reuid=swtel --regid=swtel --init-groups /usr/bin/swtel status \
		--socket /run/swtel/swtel.sock --json >/dev/null 2>&1
	# SIGHUP exercises the reload path too (the agent re-reads the same file).
	local child
	child=$(cat "/proc/$agent_pid/task/$agent_pid/children" 2>/dev/null)  # strace's child: the agent
	[ -n "$child" ] && kill -HUP $child
	wait "$agent_pid"; agent_pid=""
	kill "$collector_pid" 2>/dev/null; wait "$collector_pid" 2>/dev/null; collector_pid=""
	/usr/bin/python3 "$here/packaging/syscall-check.py" /lib/systemd/system/swtel.service "$tmp/agent.strace" &&
		/usr/bin/python3 "$here/packaging/syscall-check.py" /lib/systemd/system/swtel@.service "$tmp/agent.strace"
}
check "every syscall of the running agent passes both units' SystemCallFilter" syscall_check
cat "$tmp/step.log"
ip netns del "$ns_agent" 2>/dev/null; ip netns del "$ns_peer" 2>/dev/null

# ----------------------------------------------------------------------- purge
if [ "${SWTEL_CI_KEEP:-0}" = 1 ]; then
	log "SWTEL_CI_KEEP=1: leaving swtel installed"
else
	log "apt-get purge swtel leaves nothing behind"
	dpkg -L swtel >"$tmp/files.txt"
	# Enable both units as an operator would (offline: systemctl only makes the
	# links), so the purge must also clean up enablement links.
	check "systemctl enable swtel.service swtel@mgmt.service (links only)" \
		sh -c "systemctl enable swtel.service swtel@mgmt.service 2>&1 && ls -l /etc/systemd/system/multi-user.target.wants/ | grep swtel"
	check "apt-get purge swtel" apt-get purge -y -q swtel
	leftovers() {
		local left=0 f
		while read -r f; do
			[ "$f" = /. ] && continue
			# A directory another installed package also owns stays, rightly.
			if [ -d "$f" ] && dpkg -S "$f" >/dev/null 2>&1; then continue; fi
			if [ -e "$f" ] || [ -L "$f" ]; then echo "left behind: $f"; left=1; fi
		done <"$tmp/files.txt"
		for f in /etc/swtel /usr/lib/swtel /var/lib/swtel /var/log/swtel /run/swtel /usr/share/doc/swtel \
			/etc/systemd/system/*.wants/swtel*; do
			if [ -e "$f" ] || [ -L "$f" ]; then echo "left behind: $f"; left=1; fi
		done
		if dpkg -s swtel >/dev/null 2>&1; then echo "dpkg still knows swtel"; left=1; fi
		return $left
	}
	check "no file, directory, conffile, state or runtime dir of swtel remains" leftovers
	# Policy: the system user stays (like Debian's own packages), see debian/swtel.postrm.
	echo "note: user swtel kept after purge: $(getent passwd swtel || echo 'absent')"
fi

t_total=$(($(date +%s) - t_start))
echo
echo "packaging CI took ${t_total} s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
