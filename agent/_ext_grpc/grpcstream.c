/*
 * agent._grpcstream: one client-streaming gRPC call (dial-out's Publish) on grpc's C core
 * (Debian 12's libgrpc29), so that no Python runs per message.
 *
 * Why not grpcio: its Python client runs ~0.5 ms of Python threads per message (request
 * iterator, channel spin, reply handling): 1.4 % of a core and 25 MiB for the simulated
 * spine's two messages a tick, more than the agent's whole tick (docs/PERFORMANCE.md, "The
 * floor under dial-out"); the C core does the same for 0.4 % and ~10 MiB.
 *
 * The shape, psutil's rule: C drives the call and returns plain values; Python (the dial-out
 * exporter) keeps the queue, snapshots, reconnects and status.
 *
 *   s = Stream(target, method, metadata, tls, root_pem, cert_pem, key_pem, server_name)
 *       tls False: plaintext; root_pem None: grpc's default roots; cert_pem + key_pem: mutual TLS
 *   s.send([bytes, ...]) -> messages waiting (copied now; sent in order, one at a time)
 *   s.wait(timeout_s)    -> state() after the phase changed or the timeout ran out (GIL released)
 *   s.wait_room(n, t)    -> state() once fewer than n messages wait (or it ended, or t ran out)
 *   s.state()            -> (phase, sent, replies, waiting, status code, details, connected)
 *                           phase: 0 connecting, 1 ready (the request's headers went: connected), 2 ended
 *   s.finish()           -> half-close once every message waiting has gone
 *   s.cancel()           -> end it now
 *
 * One thread per stream drives its completion queue; a SEND_MESSAGE batch is started by
 * whoever finds none in flight (send() or the thread), under the stream's lock.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { PHASE_CONNECTING = 0, PHASE_READY = 1, PHASE_ENDED = 2 };

/* completion tags: the addresses of these (a send's tag is its message) */
static char TAG_START, TAG_HEADERS, TAG_REPLY, TAG_STATUS, TAG_CLOSE;

typedef struct message {
    grpc_byte_buffer *buffer;
    struct message *next;
} message;

typedef struct {
    PyObject_HEAD
    grpc_channel *channel;
    grpc_completion_queue *cq;
    grpc_call *call;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t changed;  /* the phase changed */
    pthread_cond_t room;     /* a message went (or the call ended) */
    message *head, *tail, *in_flight;
    Py_ssize_t waiting;
    int phase, finishing, closed, cancelled, shut;
    int connected;  /* it was READY once (a call that ends at once never was) */
    unsigned long long sent, replies;
    grpc_metadata *metadata;
    size_t n_metadata;
    grpc_metadata_array headers, trailers;
    grpc_byte_buffer *reply;
    grpc_status_code code;
    grpc_slice details;
    char *details_text;
} Stream;

/* under lock: start the next message if none is in flight; half-close when asked and none is left */
static void pump(Stream *s) {
    if (s->in_flight || s->phase == PHASE_ENDED || s->cancelled)
        return;
    if (s->head) {
        message *m = s->head;
        s->head = m->next;
        if (!s->head)
            s->tail = NULL;
        s->waiting--;
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = m->buffer;
        s->in_flight = m;
        if (grpc_call_start_batch(s->call, &op, 1, m, NULL) != GRPC_CALL_OK) {
            s->in_flight = NULL;
            grpc_byte_buffer_destroy(m->buffer);
            free(m);
        }
        return;
    }
    if (s->finishing && !s->closed) {
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        s->closed = 1;
        grpc_call_start_batch(s->call, &op, 1, &TAG_CLOSE, NULL);
    }
}

static void post_reply(Stream *s) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &s->reply;
    grpc_call_start_batch(s->call, &op, 1, &TAG_REPLY, NULL);
}

static void free_messages(message *first) {
    while (first) {
        message *m = first;
        first = m->next;
        grpc_byte_buffer_destroy(m->buffer);
        free(m);
    }
}

static void drop_waiting(Stream *s) {
    free_messages(s->head);
    s->head = NULL;
    s->tail = NULL;
    s->waiting = 0;
}

static void *drive(void *arg) {
    Stream *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        pthread_mutex_lock(&s->lock);
        int phase = s->phase;
        if (ev.tag == &TAG_START || ev.tag == &TAG_HEADERS) {
            /* the request's headers written (the connection is up), or the collector's came */
            if (ev.success && s->phase == PHASE_CONNECTING) {
                s->phase = PHASE_READY;
                s->connected = 1;
            }
        } else if (ev.tag == &TAG_REPLY) {
            if (s->reply) {  /* a reply (its content unread: dial-out's are empty); the next */
                grpc_byte_buffer_destroy(s->reply);
                s->reply = NULL;
                s->replies++;
                post_reply(s);
            }
        } else if (ev.tag == &TAG_STATUS) {
            s->phase = PHASE_ENDED;
            s->details_text = grpc_slice_to_c_string(s->details);
            drop_waiting(s);
        } else if (ev.tag != &TAG_CLOSE) {  /* a message */
            message *m = ev.tag;
            if (ev.success)
                s->sent++;
            grpc_byte_buffer_destroy(m->buffer);
            free(m);
            s->in_flight = NULL;
            pump(s);
            pthread_cond_broadcast(&s->room);
        }
        if (s->phase != phase) {
            pthread_cond_broadcast(&s->changed);
            pthread_cond_broadcast(&s->room);
        }
        int ended = s->phase == PHASE_ENDED && !s->in_flight && !s->shut;
        if (ended)
            s->shut = 1;
        pthread_mutex_unlock(&s->lock);
        if (ended)
            grpc_completion_queue_shutdown(s->cq);  /* what is left drains, then SHUTDOWN */
    }
    return NULL;
}

static PyObject *state_tuple(Stream *s) {
    return Py_BuildValue("(iKKnisO)", s->phase, s->sent, s->replies, s->waiting, (int)s->code,
                         s->details_text ? s->details_text : "", s->connected ? Py_True : Py_False);
}

static int Stream_init(Stream *s, PyObject *args, PyObject *kw) {
    static char *names[] = {"target", "method", "metadata", "tls", "root_pem", "cert_pem", "key_pem",
                            "server_name", NULL};
    const char *target, *method, *root = NULL, *cert = NULL, *key = NULL, *server_name = NULL;
    PyObject *metadata = NULL;
    int use_tls = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|Opzzzz", names, &target, &method, &metadata, &use_tls,
                                     &root, &cert, &key, &server_name))
        return -1;
    if (s->call) {
        PyErr_SetString(PyExc_RuntimeError, "a Stream is opened once");
        return -1;
    }
    if ((cert == NULL) != (key == NULL)) {
        PyErr_SetString(PyExc_ValueError, "cert_pem and key_pem go together");
        return -1;
    }
    if ((cert || root || server_name) && !use_tls) {
        PyErr_SetString(PyExc_ValueError, "root_pem, cert_pem, key_pem and server_name need tls=True");
        return -1;
    }
    PyObject *pairs = metadata && metadata != Py_None
                          ? PySequence_Fast(metadata, "metadata: a sequence of (key, value) pairs")
                          : PyTuple_New(0);
    if (!pairs)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(pairs);
    s->metadata = calloc((size_t)(n ? n : 1), sizeof(grpc_metadata));
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *k, *v;
        Py_ssize_t klen, vlen;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(pairs, i), "s#s#", &k, &klen, &v, &vlen)) {
            Py_DECREF(pairs);
            return -1;
        }
        s->metadata[i].key = grpc_slice_from_copied_buffer(k, (size_t)klen);
        s->metadata[i].value = grpc_slice_from_copied_buffer(v, (size_t)vlen);
        s->n_metadata++;
    }
    Py_DECREF(pairs);

    grpc_channel_credentials *creds;
    if (use_tls) {  /* root_pem NULL: grpc's default roots */
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        creds = grpc_ssl_credentials_create(root, cert ? &pair : NULL, NULL, NULL);
    } else {
        creds = grpc_insecure_credentials_create();
    }
    /* grpcio's path sets the same (agent/exporters/dialout.py _channel): keepalive no more often
     * than servers' default policy allows, reconnects soon (the exporter's backoff decides when
     * to retry); and, the C core's own: the collector's replies are a few bytes, so its reads
     * need no 4 MiB buffer (GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE's default) nor a growing window */
    grpc_arg args_[9];
    size_t n_args = 0;
#define INT_ARG(name, v) (args_[n_args].type = GRPC_ARG_INTEGER, args_[n_args].key = (char *)(name), \
                          args_[n_args].value.integer = (v), n_args++)
    INT_ARG(GRPC_ARG_KEEPALIVE_TIME_MS, 310000);
    INT_ARG(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
    INT_ARG(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 500);
    INT_ARG(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 30000);
    INT_ARG(GRPC_ARG_TCP_READ_CHUNK_SIZE, 16384);
    INT_ARG(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 65536);
    INT_ARG(GRPC_ARG_HTTP2_BDP_PROBE, 0);
#undef INT_ARG
    if (use_tls && server_name) {
        args_[n_args].type = GRPC_ARG_STRING;
        args_[n_args].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args_[n_args].value.string = (char *)server_name;
        n_args++;
    }
    grpc_channel_args channel_args = {n_args, args_};
    s->channel = grpc_channel_create(target, creds, &channel_args);
    grpc_channel_credentials_release(creds);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_slice method_slice = grpc_slice_from_copied_string(method);
    s->call = grpc_channel_create_call(s->channel, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq, method_slice, NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_slice_unref(method_slice);

    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = s->n_metadata;
    ops[0].data.send_initial_metadata.metadata = s->metadata;
    grpc_call_start_batch(s->call, ops, 1, &TAG_START, NULL);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[0].data.recv_initial_metadata.recv_initial_metadata = &s->headers;
    grpc_call_start_batch(s->call, ops, 1, &TAG_HEADERS, NULL);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &s->trailers;
    ops[0].data.recv_status_on_client.status = &s->code;
    ops[0].data.recv_status_on_client.status_details = &s->details;
    grpc_call_start_batch(s->call, ops, 1, &TAG_STATUS, NULL);
    post_reply(s);
    if (pthread_create(&s->thread, NULL, drive, s) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot start the stream's thread");
        return -1;
    }
    s->thread_started = 1;
    return 0;
}

/* The messages are copied into grpc's buffers and the first is handed to the call without
   the GIL: grpc often writes it to the socket inline, in this thread (a spine's tick is two
   130 kB messages), and the tick thread must not wait on that. The bytes objects stay alive
   and unchanged meanwhile: ``held`` owns a reference to each, and bytes are immutable. */
static PyObject *Stream_send(Stream *s, PyObject *messages) {
    PyObject *items = PySequence_Fast(messages, "send: a list of bytes");
    if (!items)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    PyObject **held = PyMem_Calloc((size_t)(n ? n : 1), sizeof *held);
    if (!held) {
        Py_DECREF(items);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(items, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "send: a list of bytes, not %.100s", Py_TYPE(item)->tp_name);
            for (Py_ssize_t k = 0; k < i; k++)
                Py_DECREF(held[k]);
            PyMem_Free(held);
            Py_DECREF(items);
            return NULL;
        }
        Py_INCREF(item);
        held[i] = item;
    }
    Py_DECREF(items);
    message *first = NULL, *last = NULL;
    Py_ssize_t waiting = -1;
    int out_of_memory = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        message *m = calloc(1, sizeof *m);
        if (!m) {
            out_of_memory = 1;
            break;
        }
        grpc_slice slice = grpc_slice_from_copied_buffer(PyBytes_AS_STRING(held[i]),
                                                         (size_t)PyBytes_GET_SIZE(held[i]));
        m->buffer = grpc_raw_byte_buffer_create(&slice, 1);
        grpc_slice_unref(slice);
        if (last)
            last->next = m;
        else
            first = m;
        last = m;
    }
    if (out_of_memory) {
        free_messages(first);
    } else {
        pthread_mutex_lock(&s->lock);
        if (s->phase == PHASE_ENDED || s->cancelled || s->finishing) {  /* nowhere to go: dropped */
            pthread_mutex_unlock(&s->lock);
            free_messages(first);
        } else {
            if (first) {
                if (s->tail)
                    s->tail->next = first;
                else
                    s->head = first;
                s->tail = last;
                s->waiting += n;
                pump(s);
            }
            waiting = s->waiting;
            pthread_mutex_unlock(&s->lock);
        }
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        Py_DECREF(held[i]);
    PyMem_Free(held);
    if (out_of_memory)
        return PyErr_NoMemory();
    return PyLong_FromSsize_t(waiting);
}

static PyObject *Stream_state(Stream *s, PyObject *unused) {
    pthread_mutex_lock(&s->lock);
    PyObject *out = state_tuple(s);
    pthread_mutex_unlock(&s->lock);
    return out;
}

/* CLOCK_MONOTONIC (the conditions' clock: a wall-clock step moves no wait) + timeout_s (>= 0) */
static struct timespec deadline_after(double timeout_s) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long long ns = t.tv_nsec + (long long)((timeout_s > 0 ? timeout_s : 0) * 1e9);
    t.tv_sec += (time_t)(ns / 1000000000LL);
    t.tv_nsec = (long)(ns % 1000000000LL);
    return t;
}

static PyObject *Stream_wait(Stream *s, PyObject *arg) {
    double timeout = PyFloat_AsDouble(arg);
    if (timeout == -1.0 && PyErr_Occurred())
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&s->lock);
    struct timespec until = deadline_after(timeout);
    if (s->phase != PHASE_ENDED && timeout > 0)
        pthread_cond_timedwait(&s->changed, &s->lock, &until);
    pthread_mutex_unlock(&s->lock);
    Py_END_ALLOW_THREADS
    return Stream_state(s, NULL);
}

static PyObject *Stream_wait_room(Stream *s, PyObject *args) {
    Py_ssize_t limit;
    double timeout;
    if (!PyArg_ParseTuple(args, "nd", &limit, &timeout))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&s->lock);
    struct timespec until = deadline_after(timeout);
    while (s->waiting >= limit && s->phase != PHASE_ENDED && !s->cancelled)
        if (pthread_cond_timedwait(&s->room, &s->lock, &until) != 0)
            break;
    pthread_mutex_unlock(&s->lock);
    Py_END_ALLOW_THREADS
    return Stream_state(s, NULL);
}

static PyObject *Stream_finish(Stream *s, PyObject *unused) {
    pthread_mutex_lock(&s->lock);
    s->finishing = 1;
    pump(s);
    pthread_mutex_unlock(&s->lock);
    Py_RETURN_NONE;
}

static PyObject *Stream_cancel(Stream *s, PyObject *unused) {
    pthread_mutex_lock(&s->lock);
    s->cancelled = 1;
    drop_waiting(s);
    pthread_cond_broadcast(&s->room);
    pthread_mutex_unlock(&s->lock);
    if (s->call)
        grpc_call_cancel(s->call, NULL);
    Py_RETURN_NONE;
}

static void Stream_dealloc(Stream *s) {
    if (s->call) {
        grpc_call_cancel(s->call, NULL);
        if (s->thread_started) {
            Py_BEGIN_ALLOW_THREADS
            pthread_join(s->thread, NULL);
            Py_END_ALLOW_THREADS
        }
        grpc_call_unref(s->call);
    }
    if (s->cq) {
        if (!s->thread_started) {  /* opened no thread (a failed init): drain the queue here */
            grpc_completion_queue_shutdown(s->cq);
            while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type
                   != GRPC_QUEUE_SHUTDOWN) {
            }
        }
        grpc_completion_queue_destroy(s->cq);
    }
    if (s->channel)
        grpc_channel_destroy(s->channel);
    for (size_t i = 0; i < s->n_metadata; i++) {
        grpc_slice_unref(s->metadata[i].key);
        grpc_slice_unref(s->metadata[i].value);
    }
    free(s->metadata);
    grpc_metadata_array_destroy(&s->headers);
    grpc_metadata_array_destroy(&s->trailers);
    grpc_slice_unref(s->details);
    gpr_free(s->details_text);
    drop_waiting(s);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->changed);
    pthread_cond_destroy(&s->room);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Stream_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Stream *s = (Stream *)type->tp_alloc(type, 0);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&s->changed, &monotonic);
    pthread_cond_init(&s->room, &monotonic);
    pthread_condattr_destroy(&monotonic);
    grpc_metadata_array_init(&s->headers);
    grpc_metadata_array_init(&s->trailers);
    s->details = grpc_empty_slice();
    return (PyObject *)s;
}

static PyMethodDef Stream_methods[] = {
    {"send", (PyCFunction)Stream_send, METH_O, "Queue messages (bytes) to send in order; messages waiting, -1: ended"},
    {"state", (PyCFunction)Stream_state, METH_NOARGS, "(phase, sent, replies, waiting, status code, details, connected)"},
    {"wait", (PyCFunction)Stream_wait, METH_O, "state() after a change or timeout_s"},
    {"wait_room", (PyCFunction)Stream_wait_room, METH_VARARGS,
     "wait_room(limit, timeout_s): state() once fewer than limit messages wait, the call ended, or the timeout"},
    {"finish", (PyCFunction)Stream_finish, METH_NOARGS, "Half-close once every waiting message has gone"},
    {"cancel", (PyCFunction)Stream_cancel, METH_NOARGS, "End the call now; waiting messages dropped"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StreamType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "agent._grpcstream.Stream",
    .tp_basicsize = sizeof(Stream),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One client-streaming gRPC call on grpc's C core",
    .tp_new = Stream_new,
    .tp_init = (initproc)Stream_init,
    .tp_dealloc = (destructor)Stream_dealloc,
    .tp_methods = Stream_methods,
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "agent._grpcstream",
    .m_doc = "One client-streaming gRPC call on grpc's C core.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__grpcstream(void) {
    if (PyType_Ready(&StreamType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    grpc_init();
    Py_INCREF(&StreamType);
    PyModule_AddObject(m, "Stream", (PyObject *)&StreamType);
    PyModule_AddStringConstant(m, "GRPC_VERSION", grpc_version_string());
    PyModule_AddIntConstant(m, "CONNECTING", PHASE_CONNECTING);
    PyModule_AddIntConstant(m, "READY", PHASE_READY);
    PyModule_AddIntConstant(m, "ENDED", PHASE_ENDED);
    return m;
}
