/*
 * shmq/native/sync_send.c -- a TCP producer's sync send, whole, in one C call on the caller's
 * thread (module shmq.native._sync), used by client/sync_send.py.
 *
 * Why: a sync send over TCP cost its producer 42-49 us of CPU (bench/RESULTS.md, session 4):
 * ~130,000 instructions of Python per send (the request object, the template's % fill, the
 * FrameDecoder, decode_command, send_result) and eight system calls (a poll before the send and
 * the recv that a socket with a timeout makes, and an mmap / mremap / munmap for the 256 KiB
 * bytes object each recv allocated). ``call`` does the same work in C: it draws the UNIQ_KEY,
 * writes the frame with the oneway lane's writer (send_frame.h: the template path's bytes),
 * sends it, waits for the answer with the GIL released (polling up to ``spin`` seconds before it
 * blocks, as SyncRemotingClient's spin_us; then asleep in the recv itself when the socket is in
 * blocking mode, ``block``, else in poll), reads it with the async answers' reader
 * (send_answer.h: this broker's own answer matched against its template, any other scanned) and
 * returns the SendResult. The socket is the SyncRemotingClient's own, used
 * by one thread, one request at a time.
 *
 * Every answer it does not read exactly as send_result would -- a refusal, a binary or escaped
 * header, a queueId other than the queue asked, a transactionId, a frame after the answer, an
 * answer larger than its buffer -- comes back as (uniq, bytes read): the caller feeds those bytes
 * to the client's frame decoder and its Python path takes it from there. Frames before the answer
 * that are not it (a request from the broker) are skipped, as SyncRemotingClient._response does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include "core.h"
#include "uniq_bind.h"
#include "send_frame.h"
#include "send_answer.h"

enum { ST_EMONTH = 1, ST_UNSUPPORTED = 2 };
#define ANSWER_BUF 16384   /* a send's answer is ~200 bytes; more: the Python decoder's */
#define FRAME_STACK 4096   /* frames up to this are built on the stack */

static PyObject *result_type, *send_ok;
static sa_bound tpl;  /* the broker's SUCCESS answer pieces (send_answer.h's sa_template), if bound */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* poll fd for ev until deadline: 1 ready, 0 timed out, -1 errno, -4 a signal came (intr) */
static int wait_fd(int fd, short ev, double deadline, int intr) {
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) return 0;
        struct pollfd p = {fd, ev, 0};
        int ms = (int)(left * 1000) + 1, r = poll(&p, 1, ms);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return -1;
        if (r < 0 && intr) return -4;
    }
}

/* the whole frame written: 0, or -1 errno (ETIMEDOUT: the deadline passed) */
static int send_all(int fd, const char *p, size_t n, double deadline) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) { p += w; n -= (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int r = wait_fd(fd, POLLOUT, deadline, 0);
            if (r == 0) { errno = ETIMEDOUT; return -1; }
            if (r < 0) return -1;
            continue;
        }
        return -1;
    }
    return 0;
}

/* Whether the answer to ``opaque`` is in buf[0..n): read into h (its body's length *body), the
 * last bytes read (1); not yet complete (0); or the Python decoder's from here on (-1: a frame
 * the reader does not read, or bytes after the answer). */
static int find_answer(const char *buf, size_t n, int64_t opaque, header *h, Py_ssize_t *body) {
    size_t pos = 0;
    while (n - pos >= 4) {
        size_t total = rh_be32((const uint8_t *)buf + pos);
        if (total < 4 || total > n - pos - 4) return total < 4 || total > ANSWER_BUF ? -1 : 0;
        /* this broker's own SUCCESS answer is matched against its template, not scanned */
        if (!sa_bound_header(&tpl, buf + pos + 4, (Py_ssize_t)total, h)) *body = 0;
        else if (frame_header(buf + pos + 4, (Py_ssize_t)total, h, body, NULL)) return -1;
        if ((h->flag & 1) && h->opaque == opaque) return pos + 4 + total == n ? 1 : -1;
        pos += 4 + total;  /* not the answer: a request from the broker, dropped as in Python */
    }
    return 0;
}

/* read until the answer is whole: 1 (read into h), -1 the Python decoder's (*n bytes read), 0
 * timed out, -2 closed by the peer, -3 errno, -4 a signal interrupted the wait (call again).
 * ``block`` > 0: the socket is in blocking mode with SO_RCVTIMEO of ``block`` seconds
 * (SyncRemotingClient.block): a wait whose deadline is no sooner than that (less 1 ms) sleeps in
 * the recv itself, as a blocking echo client does; a poll first was one more system call and
 * wake-up path on the round trip (~1.5 us here). A recv that SO_RCVTIMEO ends (EAGAIN) goes on
 * with poll up to the deadline, as a non-blocking socket (block 0) always does. */
static int read_answer(int fd, char *buf, size_t *n, int64_t opaque, double spin, double block, double deadline,
                       header *h, Py_ssize_t *body) {
    double spin_end = spin > 0 ? now_s() + spin : 0;
    int sleep_in_recv = 0;
    for (int first = 1;; first = 0) {
        if (!spin_end || now_s() >= spin_end) {  /* not (or no longer) polling */
            sleep_in_recv = block > 0 && deadline - now_s() >= block - 0.001;
            if (!sleep_in_recv && (first || spin_end)) {  /* the answer is not there yet: wait for it */
                int w = wait_fd(fd, POLLIN, deadline, 1);
                if (w <= 0) return w == -1 ? -3 : w;
            }
            spin_end = 0;
        }
        ssize_t r = recv(fd, buf + *n, ANSWER_BUF - *n, sleep_in_recv ? 0 : MSG_DONTWAIT);
        if (r > 0) {
            *n += (size_t)r;
            int f = find_answer(buf, *n, opaque, h, body);
            if (f) return f;
            if (*n == ANSWER_BUF) return -1;
            continue;
        }
        if (r == 0) return -2;
        if (errno == EINTR) {
            if (sleep_in_recv) return -4;  /* a signal's handlers first (KeyboardInterrupt) */
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -3;
        if (spin_end) continue;
        if (sleep_in_recv) {  /* SO_RCVTIMEO ended it: poll what is left of the deadline */
            block = 0;
            sleep_in_recv = 0;
        }
        int w = wait_fd(fd, POLLIN, deadline, 1);
        if (w <= 0) return w == -1 ? -3 : w;
    }
}

/* the SendResult of a SUCCESS answer ``h`` (send_result's rules), or None: Python's */
static PyObject *result_of(const header *h, Py_ssize_t body, PyObject *uniq, PyObject *mq) {
    long qid = -1;
    if (PyTuple_Check(mq) && PyTuple_GET_SIZE(mq) == 3 && PyLong_CheckExact(PyTuple_GET_ITEM(mq, 2)))
        qid = PyLong_AsLong(PyTuple_GET_ITEM(mq, 2));
    span msg_id;
    int64_t offset;
    if (h->code || body || !h->has_ext || qid < 0 || success_fields(h, qid, &msg_id, &offset)) Py_RETURN_NONE;
    PyObject *mid = PyUnicode_DecodeASCII((const char *)msg_id.p, msg_id.n, NULL);
    PyObject *off = mid ? PyLong_FromLongLong(offset) : NULL;
    int truthy = off ? PyObject_IsTrue(uniq) : -1;
    PyObject *r = NULL;
    if (truthy >= 0) {
        PyObject *args[5] = {send_ok, truthy ? uniq : mid, mid, mq, off};
        r = PyObject_Vectorcall(result_type, args, 5, NULL);
    }
    Py_XDECREF(mid);
    Py_XDECREF(off);
    return r;
}

/* the answer's bytes (the GIL held): a SendResult, or (uniq, data) for the Python path; NULL
 * with the error set for a timeout, a close or a socket error */
static PyObject *answer(int rc, int err, const char *buf, size_t n, const header *h, Py_ssize_t body,
                        PyObject *uniq, PyObject *mq) {
    if (rc == 0) { PyErr_SetString(PyExc_TimeoutError, "no answer in time"); return NULL; }
    if (rc == -2) { PyErr_SetString(PyExc_ConnectionResetError, "closed by the server"); return NULL; }
    if (rc == -3) { errno = err; return PyErr_SetFromErrno(PyExc_OSError); }
    if (rc == 1) {
        PyObject *r = result_of(h, body, uniq, mq);
        if (r != Py_None) return r;
        Py_DECREF(r);
    }
    PyObject *data = PyBytes_FromStringAndSize(buf, (Py_ssize_t)n);
    return data ? Py_BuildValue("(ON)", uniq, data) : NULL;
}

/* the frame's own parts, read from call()'s arguments (the GIL held): 0, a status, or -1 raised */
typedef struct {
    sf_pieces pc;
    long long sysflag, flag;
    const char *tags, *body;
    Py_ssize_t tn, tj, bl;
    double timeout, spin;
    int64_t opaque;
} request;

static int request_of(PyObject *const *a, request *q) {
    if (sf_pieces_of(a[1], &q->pc)) return -1;
    if (!PyBytes_CheckExact(a[5])) { PyErr_SetString(PyExc_TypeError, "body: bytes"); return -1; }
    q->sysflag = PyLong_AsLongLong(a[2]);
    q->flag = PyLong_AsLongLong(a[3]);
    q->opaque = PyLong_AsLongLong(a[7]);
    q->timeout = PyFloat_AsDouble(a[8]);
    q->spin = PyFloat_AsDouble(a[9]);
    if (PyErr_Occurred()) return -1;
    int tst = sf_tags_of(a[4], &q->tags, &q->tn, &q->tj);
    if (tst) return tst < 0 ? -1 : ST_UNSUPPORTED;
    q->body = PyBytes_AS_STRING(a[5]);
    q->bl = PyBytes_GET_SIZE(a[5]);
    return 0;
}

/* call(fd, pieces, sysflag, flag, tags, body, uniq, opaque, timeout, spin, mq[, block]) -> a SendResult,
 * (uniq, bytes read) for the Python path, or the int EMONTH / UNSUPPORTED with nothing sent.
 * uniq None: a message's, drawn here and put in its properties with tags; else a batch's ids
 * (properties ""). Raises TimeoutError, ConnectionResetError (EOF) or OSError: the connection is
 * then in an unknown state and the caller closes it. */
static PyObject *s_call(PyObject *self, PyObject *const *a, Py_ssize_t na) {
    if (na != 11 && na != 12) { PyErr_SetString(PyExc_TypeError, "call() takes 11 or 12 arguments"); return NULL; }
    double block = na == 12 ? PyFloat_AsDouble(a[11]) : 0;
    if (block == -1 && PyErr_Occurred()) return NULL;
    if (!f_uniq || !result_type) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    int fd = PyObject_AsFileDescriptor(a[0]);
    request q;
    int st = fd < 0 ? -1 : request_of(a, &q);
    if (st) return st < 0 ? NULL : PyLong_FromLong(st);
    char id[32];
    PyObject *uniq = a[6];
    if (uniq == Py_None) {
        if (f_uniq(the_uniq, 1, id)) return PyLong_FromLong(ST_EMONTH);
        if (!(uniq = PyUnicode_New(32, 127))) return NULL;
        memcpy(PyUnicode_DATA(uniq), id, 32);
    } else {
        Py_INCREF(uniq);
    }
    long long born = sf_born_ms();
    char stack[FRAME_STACK], *f = stack;
    Py_ssize_t most = sf_most(&q.pc, q.tags, q.tj, a[6] == Py_None ? id : NULL, q.bl);
    if (most > FRAME_STACK && !(f = PyMem_RawMalloc((size_t)most))) { Py_DECREF(uniq); return PyErr_NoMemory(); }
    Py_ssize_t len = sf_write(f, &q.pc, q.sysflag, born, q.flag, q.tags, q.tn, a[6] == Py_None ? id : NULL,
                              (uint32_t)q.opaque, q.body, q.bl);
    PyObject *r = NULL;
    if (len < 0) {
        PyErr_Format(PyExc_ValueError, "header of %zd bytes does not fit the 24-bit header length", -len);
        goto out;
    }
    char buf[ANSWER_BUF];
    size_t n = 0;
    header h;
    Py_ssize_t body = 0;
    int rc, err = 0, sent = 0;
    double deadline = now_s() + q.timeout;
    for (;;) {  /* the GIL is taken back only for a signal's handlers (KeyboardInterrupt) */
        Py_BEGIN_ALLOW_THREADS
        rc = sent ? 0 : send_all(fd, f, (size_t)len, deadline);
        if (rc < 0) rc = errno == ETIMEDOUT ? 0 : -3;
        else sent = 1, rc = read_answer(fd, buf, &n, q.opaque, q.spin, block, deadline, &h, &body);
        err = errno;
        Py_END_ALLOW_THREADS
        if (rc != -4) break;
        if (PyErr_CheckSignals()) goto out;
    }
    r = answer(rc, err, buf, n, &h, body, uniq, a[10]);
out:
    if (f != stack) PyMem_RawFree(f);
    Py_DECREF(uniq);
    return r;
}

/* ---- send_batch's steady case, whole (client/sync_send.py send_batch_steady) ----
 *
 * Why: send_batch_plain's Python around its two C calls (the checks, the route cache, the round
 * robin, the connection, its turn, _exchange) was ~9,500 instructions a batch of 32, a third of
 * the producer's own (RESULTS: session 15, batch15). Here the same steps, in the same order,
 * with the same objects: nothing is drawn (round robin, opaque) before the batch is encoded, and
 * every case this does not take is the Python code's, from the step where it left:
 *   - before the encode (no LaneState yet, fault selection, local links, a request hook, not a
 *     list of exact Messages, a topic no send has checked or a retry topic, a route not cached
 *     as the producer's current one) and when the encoder does not take the batch (None, any
 *     status: EMONTH included, rolled there): ``fallback(p, msgs)``, send_batch_plain, which
 *     decides it from the start;
 *   - after the draw: no open connection for the queue's broker, a connection with bytes read
 *     ahead, a try that raised or whose answer the C reader did not read:
 *     ``resume(p, body, ids, info, mq, addr, c, opaque, deadline, out)``, which goes on as
 *     send_batch_plain does after its _exchange (the same drops, errors and retries). */
static PyObject *b_encode, *b_uniq, *b_message, *b_tags_head, *b_fallback, *b_resume, *b_retry, *b_zero;
static PyObject *n_lane_state, *n_fault, *n_links, *n_inst, *n_sendable, *n_rr, *n_timeout, *n_rpc_hook,
    *n_publish, *n_broker_addrs, *n_batch_routes, *n_max_size, *n_tls, *n_conns, *n_turn, *n_block_s, *n_block,
    *n_spin_s, *n_sock, *n_pieces, *n_topic, *n_tags;

static PyObject *s_call(PyObject *self, PyObject *const *a, Py_ssize_t na);

/* obj.name is truthy: 1, 0, or -1 raised */
static int attr_true(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* the steps before the draw: 1 with (*info, *targets, *enc) set (new references), 0 the
 * fallback's, -1 raised */
static int batch_ready(PyObject *p, PyObject *s, PyObject *msgs, PyObject **info, PyObject **targets, PyObject **enc) {
    PyObject *inst = NULL, *m0 = NULL, *topic = NULL, *tags = NULL, *head = NULL, *routes = NULL, *pub = NULL,
             *lim = NULL, *set = NULL, *r = NULL;
    int rc = -1, t;
    if ((t = attr_true(s, n_fault)) != 0) return t;
    PyObject *links = PyObject_GetAttr(s, n_links);
    if (!links) return -1;
    Py_DECREF(links);
    if (links != Py_None || !PyList_CheckExact(msgs) || PyList_GET_SIZE(msgs) == 0) return 0;
    m0 = PyList_GET_ITEM(msgs, 0);
    if ((PyObject *)Py_TYPE(m0) != b_message) return 0;
    if (!(inst = PyObject_GetAttr(s, n_inst))) return -1;
    rc = 0;
    if (inst == Py_None) goto out;
    PyObject *hook = PyObject_GetAttr(inst, n_rpc_hook);
    if (!hook) goto fail;
    Py_DECREF(hook);
    if (hook != Py_None) goto out;
    if (!(topic = PyObject_GetAttr(m0, n_topic)) || !(tags = PyObject_GetAttr(m0, n_tags)) ||
        !(set = PyObject_GetAttr(s, n_sendable)))
        goto fail;
    if (!PyUnicode_CheckExact(topic)) goto out;
    if ((t = PySet_Contains(set, topic)) <= 0) { if (t < 0) goto fail; goto out; }
    if ((t = (int)PyUnicode_Tailmatch(topic, b_retry, 0, PY_SSIZE_T_MAX, -1)) != 0) { if (t < 0) goto fail; goto out; }
    if (!(routes = PyObject_GetAttr(p, n_batch_routes)) || !(pub = PyObject_GetAttr(inst, n_publish))) goto fail;
    if (!PyDict_CheckExact(routes) || !PyDict_CheckExact(pub)) goto out;
    r = PyDict_GetItemWithError(routes, topic);
    if (!r) { if (PyErr_Occurred()) goto fail; goto out; }
    Py_INCREF(r);  /* held across the calls below (_tags_head, the encoder) */
    PyObject *cur = PyDict_GetItemWithError(pub, topic);
    if (!cur && PyErr_Occurred()) goto fail;
    if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2 || PyTuple_GET_ITEM(r, 0) != cur ||
        !PyList_CheckExact(PyTuple_GET_ITEM(r, 1)) || PyList_GET_SIZE(PyTuple_GET_ITEM(r, 1)) == 0)
        goto out;
    if ((t = PyObject_IsTrue(tags)) < 0) goto fail;
    if (!t) head = PyBytes_FromStringAndSize(NULL, 0);
    else head = PyObject_CallOneArg(b_tags_head, tags);
    if (!head) goto fail;
    if (!PyBytes_CheckExact(head)) goto out;  /* None: tags only the general path takes */
    if (!(lim = PyObject_GetAttr(p, n_max_size))) goto fail;
    PyObject *args[4] = {b_uniq, msgs, head, lim};
    PyObject *e = PyObject_Vectorcall(b_encode, args, 4, NULL);
    if (!e) goto fail;
    if (!PyTuple_CheckExact(e)) { Py_DECREF(e); goto out; }  /* None or a status: the fallback's */
    *info = Py_NewRef(PyTuple_GET_ITEM(r, 0));
    *targets = Py_NewRef(PyTuple_GET_ITEM(r, 1));
    *enc = e;
    rc = 1;
    goto out;
fail:
    rc = -1;
out:
    Py_XDECREF(inst);
    Py_XDECREF(topic);
    Py_XDECREF(tags);
    Py_XDECREF(set);
    Py_XDECREF(head);
    Py_XDECREF(routes);
    Py_XDECREF(pub);
    Py_XDECREF(lim);
    Py_XDECREF(r);
    return rc;
}

/* c.turn() (protocol/client.py SyncRemotingClient): the next opaque, or 0 (none drawn) with
 * bytes read ahead; called, not mirrored: the opaque's step and the read-ahead test are the
 * client's own */
static long long conn_turn(PyObject *c) {
    PyObject *o = PyObject_CallMethodNoArgs(c, n_turn);
    if (!o) return -1;
    long long v = PyLong_AsLongLong(o);
    Py_DECREF(o);
    return v == -1 && PyErr_Occurred() ? -1 : v;
}

/* batch(p, msgs): p.send_batch(msgs)'s TCP steady case (above) -> its SendResult, or what
 * fallback / resume answer */
static PyObject *s_batch(PyObject *self, PyObject *const *a, Py_ssize_t na) {
    if (na != 2) { PyErr_SetString(PyExc_TypeError, "batch(p, msgs)"); return NULL; }
    if (!b_encode || !result_type) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    PyObject *p = a[0], *msgs = a[1];
    PyObject *s = PyObject_GetAttr(p, n_lane_state);
    if (!s) return NULL;
    PyObject *info = NULL, *targets = NULL, *enc = NULL, *tmo = NULL, *nx = NULL, *addrs = NULL, *addr = NULL,
             *tls = NULL, *conns = NULL, *c = NULL, *out = NULL, *r = NULL, *dl = NULL, *op = NULL, *tg = NULL;
    long long opaque = 0;
    int st = s == Py_None ? 0 : batch_ready(p, s, msgs, &info, &targets, &enc);
    if (st <= 0) {
        Py_DECREF(s);
        return st < 0 ? NULL : PyObject_Vectorcall(b_fallback, a, 2, NULL);
    }
    /* the deadline, then the round robin (send_batch_plain's order) */
    if (!(tmo = PyObject_GetAttr(s, n_timeout))) goto done;
    double timeout = PyFloat_AsDouble(tmo);
    if (timeout == -1 && PyErr_Occurred()) goto done;
    double deadline = now_s() + timeout;
    PyObject *rr = PyObject_GetAttr(s, n_rr);
    if (!rr) goto done;
    nx = PyIter_Next(rr);
    Py_DECREF(rr);
    if (!nx) { if (!PyErr_Occurred()) PyErr_SetNone(PyExc_StopIteration); goto done; }
    Py_ssize_t k = PyLong_AsSsize_t(nx), len = PyList_GET_SIZE(targets);
    if (k == -1 && PyErr_Occurred()) goto done;
    tg = Py_NewRef(PyList_GET_ITEM(targets, k % len));  /* (its mq and template: borrowed from it) */
    if (!PyTuple_CheckExact(tg) || PyTuple_GET_SIZE(tg) != 2) { PyErr_SetString(PyExc_TypeError, "a batch target"); goto done; }
    PyObject *mq = PyTuple_GET_ITEM(tg, 0), *t = PyTuple_GET_ITEM(tg, 1);
    if (!PyTuple_Check(mq) || PyTuple_GET_SIZE(mq) != 3) { PyErr_SetString(PyExc_TypeError, "a MessageQueue"); goto done; }
    /* addr = inst.broker_addrs.get(mq.broker_name, {}).get(0); c = p._tls.conns.get(addr) */
    PyObject *inst = PyObject_GetAttr(s, n_inst);
    if (!inst) goto done;
    addrs = PyObject_GetAttr(inst, n_broker_addrs);
    Py_DECREF(inst);
    if (!addrs) goto done;
    PyObject *found = Py_None;
    if (PyDict_CheckExact(addrs)) {
        PyObject *by_id = PyDict_GetItemWithError(addrs, PyTuple_GET_ITEM(mq, 1));
        if (!by_id && PyErr_Occurred()) goto done;
        if (by_id && PyDict_CheckExact(by_id)) {
            PyObject *m = PyDict_GetItemWithError(by_id, b_zero);
            if (!m && PyErr_Occurred()) goto done;
            if (m) found = m;
        }
    }
    addr = Py_NewRef(found);
    if (addr != Py_None) {
        if (!(tls = PyObject_GetAttr(p, n_tls))) goto done;
        if (!(conns = PyObject_GetAttr(tls, n_conns))) {  /* none yet on this thread */
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) goto done;
            PyErr_Clear();
        }
        if (conns && PyDict_CheckExact(conns)) {
            c = PyDict_GetItemWithError(conns, addr);
            if (!c && PyErr_Occurred()) goto done;
            Py_XINCREF(c);
        }
    }
    if (c) {  /* _exchange: its turn, blocking mode, the one C call */
        opaque = conn_turn(c);
        if (opaque < 0) goto done;
    }
    if (opaque) {
        PyObject *blk = PyObject_GetAttr(c, n_block_s);
        if (!blk) goto done;
        int bt = PyObject_IsTrue(blk);
        if (bt <= 0) {
            Py_DECREF(blk);
            if (bt < 0 || !(blk = PyObject_CallMethodNoArgs(c, n_block))) goto done;
        }
        PyObject *spin = PyObject_GetAttr(c, n_spin_s), *sock = spin ? PyObject_GetAttr(c, n_sock) : NULL;
        PyObject *pieces = sock ? PyObject_GetAttr(t, n_pieces) : NULL;
        op = pieces ? PyLong_FromLongLong(opaque) : NULL;
        if (op) {
            PyObject *args[12] = {sock, pieces, b_zero, b_zero, Py_None, PyTuple_GET_ITEM(enc, 0), PyTuple_GET_ITEM(enc, 1),
                                  op, tmo, spin, mq, blk};
            out = s_call(self, args, 12);
        }
        Py_XDECREF(spin);
        Py_XDECREF(sock);
        Py_XDECREF(pieces);
        Py_DECREF(blk);
        if (!out) {  /* a timeout or a socket error: the resume's (it drops the connection) */
            if (!op || !(PyErr_ExceptionMatches(PyExc_OSError))) goto done;
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            PyErr_NormalizeException(&et, &ev, &tb);
            if (tb && ev) PyException_SetTraceback(ev, tb);
            Py_XDECREF(et);
            Py_XDECREF(tb);
            if (!(out = ev)) goto done;
        } else if (Py_IS_TYPE(out, (PyTypeObject *)result_type)) {
            r = out;
            out = NULL;
            goto done;
        }
    }
    if (!(dl = PyFloat_FromDouble(deadline)) || (!op && !(op = PyLong_FromLongLong(opaque)))) goto done;
    PyObject *args[10] = {p, PyTuple_GET_ITEM(enc, 0), PyTuple_GET_ITEM(enc, 1), info, mq, addr, c ? c : Py_None,
                          op, dl, out ? out : Py_None};
    r = PyObject_Vectorcall(b_resume, args, 10, NULL);
done:
    Py_DECREF(s);
    Py_XDECREF(info);
    Py_XDECREF(targets);
    Py_XDECREF(tg);
    Py_XDECREF(enc);
    Py_XDECREF(tmo);
    Py_XDECREF(nx);
    Py_XDECREF(addrs);
    Py_XDECREF(addr);
    Py_XDECREF(tls);
    Py_XDECREF(conns);
    Py_XDECREF(c);
    Py_XDECREF(out);
    Py_XDECREF(dl);
    Py_XDECREF(op);
    return r;
}

/* bind_batch(encode_batch, uniq address, Message, _tags_head, fallback, resume, RETRY_PREFIX): once */
static PyObject *s_bind_batch(PyObject *self, PyObject *args) {
    PyObject *o[7];
    if (!PyArg_ParseTuple(args, "OOOOOOU", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6])) return NULL;
    PyObject **dst[7] = {&b_encode, &b_uniq, &b_message, &b_tags_head, &b_fallback, &b_resume, &b_retry};
    for (int k = 0; k < 7; k++) Py_XSETREF(*dst[k], Py_NewRef(o[k]));
    if (!b_zero && !(b_zero = PyLong_FromLong(0))) return NULL;
    struct { PyObject **n; const char *s; } names[] = {
        {&n_lane_state, "_lane_state"}, {&n_fault, "fault"}, {&n_links, "links"}, {&n_inst, "inst"},
        {&n_sendable, "sendable"}, {&n_rr, "rr"}, {&n_timeout, "timeout"}, {&n_rpc_hook, "rpc_hook"},
        {&n_publish, "publish"}, {&n_broker_addrs, "broker_addrs"}, {&n_batch_routes, "_batch_routes"},
        {&n_max_size, "max_message_size"}, {&n_tls, "_tls"}, {&n_conns, "conns"}, {&n_turn, "turn"},
        {&n_block_s, "block_s"},
        {&n_block, "block"}, {&n_spin_s, "spin_s"}, {&n_sock, "sock"}, {&n_pieces, "pieces"}, {&n_topic, "topic"},
        {&n_tags, "tags"}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!*names[k].n && !(*names[k].n = PyUnicode_InternFromString(names[k].s))) return NULL;
    Py_RETURN_NONE;
}

/* bind(SendResult, SendStatus.SEND_OK, shmq_uniq_ids address, shmq_uniq address): once, at import */
static PyObject *s_bind(PyObject *self, PyObject *args) {
    PyObject *t, *ok, *f, *u;
    if (!PyArg_ParseTuple(args, "OOOO", &t, &ok, &f, &u)) return NULL;
    PyObject *pair = PyTuple_Pack(2, f, u);
    PyObject *r = pair ? uniq_bind(self, pair) : NULL;
    Py_XDECREF(pair);
    if (!r) return NULL;
    Py_XSETREF(result_type, Py_NewRef(t));
    Py_XSETREF(send_ok, Py_NewRef(ok));
    return r;
}

/* bind_template(pieces or None): the broker's SUCCESS answer header (protocol/send_answer.py's
 * answer_pieces), matched before an answer is scanned; None: every answer scanned (the tests) */
static PyObject *s_bind_template(PyObject *self, PyObject *pieces) { return sa_bind(&tpl, pieces); }

/* the tests' view: find_answer over bytes -> (1, code, opaque, body) / 0 / -1 */
static PyObject *s_find(PyObject *self, PyObject *args) {
    Py_buffer b;
    long long opaque;
    if (!PyArg_ParseTuple(args, "y*L", &b, &opaque)) return NULL;
    header h;
    Py_ssize_t body = 0;
    int f = b.len > ANSWER_BUF ? -1 : find_answer(b.buf, (size_t)b.len, opaque, &h, &body);
    PyBuffer_Release(&b);
    if (f != 1) return PyLong_FromLong(f);
    return Py_BuildValue("(iLLn)", 1, (long long)h.code, (long long)h.opaque, body);
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)s_bind, METH_VARARGS, "bind(SendResult, SEND_OK, shmq_uniq_ids address, shmq_uniq address)"},
    {"call", (PyCFunction)(void (*)(void))s_call, METH_FASTCALL,
     "call(fd, pieces, sysflag, flag, tags, body, uniq, opaque, timeout, spin, mq[, block])"},
    {"batch", (PyCFunction)(void (*)(void))s_batch, METH_FASTCALL,
     "batch(p, msgs): send_batch's TCP steady case (client/sync_send.py send_batch_steady)"},
    {"bind_batch", (PyCFunction)s_bind_batch, METH_VARARGS,
     "bind_batch(encode_batch, uniq address, Message, _tags_head, fallback, resume, RETRY_PREFIX)"},
    {"find", (PyCFunction)s_find, METH_VARARGS, "find(data, opaque): the answer reader's verdict"},
    {"bind_template", (PyCFunction)s_bind_template, METH_O,
     "bind_template(answer_pieces() or None): the broker's SUCCESS answer, matched before it is scanned"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sync", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sync(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyModule_AddIntConstant(m, "EMONTH", ST_EMONTH);
    PyModule_AddIntConstant(m, "UNSUPPORTED", ST_UNSUPPORTED);
    return m;
}
