/* aitb-delayline: a user-space delay line for kernels without sch_netem.
 *
 * An iptables NFQUEUE rule (mangle PREROUTING -i IF -j NFQUEUE --queue-num N, no
 * --queue-bypass) hands each packet arriving on a lab interface to this process.  The process
 * keeps only the packet id (and the first 128 bytes, to know the length), holds the verdict
 * until arrival + delay (+ jitter) and then issues NF_ACCEPT -- batched and in order where the
 * queue keeps order.  Loss, Gilbert-Elliott loss, reordering and bit corruption are decided at
 * arrival with a seeded PRNG per queue and per purpose, so a seed gives the same pattern again.
 *
 * Timing (timer slack 1 ns): when the next release is nearer than any new packet could be
 * due (the smallest delay a queue may draw) and within 1 ms, the loop sleeps in
 * clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) with no wake-up per arrival and reads what
 * came meanwhile after it; otherwise in epoll_pwait2, woken by arrivals.  It spins the last
 * --spin-us (default 150) before a release only while releases are sparse (at least 10 x the
 * spin apart): at 1 Gbit/s of MTU packets (one release every ~12 us) spinning would keep the
 * helper on a core all the time.  Dense releases instead wake early by how late timed sleeps
 * have ended (an average over the last ~8, the wake_lead_ns of the stats) and spin only that
 * stretch, at most --wake-lead-max-us (default 25; 0: off).  --coalesce-us C (default 0)
 * releases at most once per C.
 * A dedicated CPU (--cpu N --spin-dense, with --rt-prio): the helper pins itself to CPU N and
 * spins before every release, dense or not (yielding to helpers of its priority on that CPU),
 * while the lab steers every interface's receive processing (RPS) to the other CPUs.  Why:
 * each verdict sendto runs the rest of the packet's path inside the call (nf_reinject) -- for
 * TCP the receiver's stack, its ACK and, when the ACK is received on this CPU too, the
 * sender's next segments and their arrival here; RPS elsewhere takes most of the latter.
 * It spins through every gap of up to --spin-dense-us (default 2000) before a release instead
 * of the last --spin-us only: at 1 Gbit/s of MTU packets through HTB the releases come in
 * bursts ~0.45 ms apart, and in each such sleep other tasks ran on CPU N; this kernel
 * (preempt=none) switches to the woken helper only when the task there leaves the kernel, so
 * 1-3 % of those sleeps ended 0.1-3.6 ms late (the main source of the p99, measured with a
 * per-iteration log of the loop).  Spinning all the time would be worse: an RT task that never
 * sleeps has 50 ms taken at once for the CPU's other tasks (RT throttling / the fair server keep
 * 5 % of each second for them: 49 ms errors), so it keeps sleeping a tenth of its time
 * (dense_credit_ns), in the gaps it would have slept in anyway.  README "native delay line"
 * has the before/after of bench/delayline_accuracy.py --isolate.  It costs that CPU (0.9-1.5
 * CPU-s per Gbit carried at 1 Gbit/s of MTU packets, against 0.4-0.6).
 * Stats files and the --pktlog are written by a second thread (SCHED_OTHER, on the CPUs other
 * than --cpu): writing them in the loop took 0.3-5 ms twice a second, late releases for every
 * packet due meanwhile.  The loop copies the counters (take_snapshot) and hands pktlog records
 * over a ring (LOGRING records per queue; a full ring waits, counted as pktlog_waits).
 * The stats count syscalls and wake-ups (recv_calls, recv_msgs, send_calls, verdict_msgs,
 * epoll_wakeups, timer_wakeups).
 *
 * Clock: every timestamp is CLOCK_MONOTONIC, taken by this process (arrival = when the packet's
 * netlink message was read from the socket, release = just before the verdict is sent).  Time a
 * packet spent in the netlink socket buffer before it was read is not in the figures.
 *
 * Fail-closed: NFQA_CFG_F_FAIL_OPEN is never set; when this process dies the kernel drops
 * the queued and all further packets of its queues (the rule has no --queue-bypass).
 * It never outlives its controller: PR_SET_PDEATHSIG(SIGKILL) and a check of --parent-pid.
 *
 * Distributions (jitter_us is the standard deviation of the added term for normal, pareto and
 * paretonormal; the half-width for uniform), defined here from their definitions:
 *   uniform:      delay + jitter * U(-1, 1)                        (netem without a table)
 *   normal:       delay + jitter * N(0, 1)                         (Box-Muller)
 *   pareto:       delay + jitter * (Y - 1.5) / sqrt(0.75), Y = Pareto(x_m = 1, alpha = 3)
 *                 (standardised: mean delay stays `delay`, long right tail)
 *   paretonormal: delay + jitter * (0.25 N + 0.75 P) / sqrt(0.625), P the standardised pareto
 * negative results are clamped to 0.
 * Gilbert-Elliott (netem's gemodel p r 1-h 1-k, all percent): a packet is lost with 1-k in the
 * good state, with 1-h in the bad state; after the decision the state moves good->bad with p,
 * bad->good with r.
 * Order: with reorder_ok=0 (the default) a packet's release is at least the previous packet's
 * (FIFO: target = max(previous target, arrival + draw)), so a packet behind a later-drawn one
 * waits for it; the stats keep both the drawn delays (drawn_delay) and what packets got
 * (added_delay, release - arrival).  reorder_ok=1 releases each at its own arrival + draw.
 * Reorder (netem's reorder PCT gap GAP): once GAP-1 packets were delayed normally, the next
 * packet is sent immediately with probability PCT (the counter restarts when it is).
 * Duplicate is refused: a verdict can accept or drop a queued packet but not emit a second copy.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <setjmp.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define MAXQ 64
#define COPY_SMALL 128
#define HBUCKETS 3840
#define RECV_BUF (70 * 1024) /* > one 0xffff copy plus headers */
#define RECV_SMALL 2048     /* > a COPY_SMALL copy plus every attribute the kernel adds */
#define SEND_BUF (60 * 1024)

enum dist { D_UNIFORM, D_NORMAL, D_PARETO, D_PARETONORMAL };
static const char *dist_names[] = {"uniform", "normal", "pareto", "paretonormal"};

/* ---------- PRNG: splitmix64 to seed, xoshiro256** to draw ---------- */
typedef struct { uint64_t s[4]; } rng_t;
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static void rng_seed(rng_t *r, uint64_t seed, uint64_t salt) {
    uint64_t x = seed ^ (salt * 0xd1b54a32d192ed03ULL);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t rng_next(rng_t *r) {
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}
static double rng_u01(rng_t *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; } /* [0,1) */
static double rng_normal(rng_t *r) {
    double u1 = 1.0 - rng_u01(r), u2 = rng_u01(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
static double rng_pareto_std(rng_t *r) {
    double u = 1.0 - rng_u01(r);             /* (0,1] */
    double y = pow(u, -1.0 / 3.0);            /* Pareto x_m=1 alpha=3: mean 1.5, var 0.75 */
    return (y - 1.5) / sqrt(0.75);
}

/* ---------- log-linear histogram (1/64 relative resolution), values in ns ---------- */
typedef struct { uint64_t b[HBUCKETS]; uint64_t n, max, min; double sum; } hist_t;
static int hidx(uint64_t v) {
    if (v < 128) return (int)v;
    int msb = 63 - __builtin_clzll(v), sh = msb - 6;
    return 128 + (sh - 1) * 64 + (int)((v >> sh) - 64);
}
static double hmid(int i) {
    if (i < 128) return i;
    int sh = (i - 128) / 64 + 1;
    uint64_t lo = ((uint64_t)((i - 128) % 64 + 64)) << sh;
    return (double)lo + ((double)(1ULL << sh) - 1) / 2.0;
}
static void hadd(hist_t *h, uint64_t v) {
    h->b[hidx(v)]++; h->n++; h->sum += (double)v;
    if (v > h->max) h->max = v;
    if (h->n == 1 || v < h->min) h->min = v;
}
static double hpct(const hist_t *h, double q) {
    if (!h->n) return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)h->n), acc = 0;
    if (rank < 1) rank = 1;
    for (int i = 0; i < HBUCKETS; i++) {
        acc += h->b[i];
        if (acc >= rank) { double m = hmid(i); return m > (double)h->max ? (double)h->max : m; }
    }
    return (double)h->max;
}

/* ---------- per-queue parameters, packets and state ---------- */
typedef struct {
    uint64_t delay_ns, jitter_ns;
    int dist, reorder_ok;
    double loss_pct, ge_p, ge_r, ge_1h, ge_1k, reorder_pct, corrupt_pct;
    uint32_t reorder_gap, maxlen;
    uint64_t seed;
} params_t;

typedef struct {
    uint64_t arrival, target, seq;
    uint32_t id, len, caplen;
    uint32_t flags;
    unsigned char *data; /* only for corrupted packets: the modified copy */
} pkt_t;

enum { F_LOSS = 1, F_GE = 2, F_CORRUPT = 4, F_REORDER = 8 };

typedef struct { uint64_t off_ns, delay_ns; double loss_pct; int64_t jitter_ns; } step_t;

/* one --pktlog record (testbed/delay/nfqueue/stats.py PKTLOG_RECORD) and the ring that carries it
   from the loop to the writer thread: the loop only stores; the thread does the write(2) */
typedef struct { uint64_t a, t, r; uint32_t len, flags; } logrec_t;
#define LOGRING (1u << 17) /* records (4 MiB): 1.6 s of 80 000 packets/s */
typedef struct { logrec_t *buf; _Atomic uint64_t head, tail; } ring_t;

typedef struct {
    uint16_t num;
    params_t p;
    rng_t r_loss, r_ge, r_jit, r_cor, r_reo;
    int ge_bad;
    uint32_t reo_count;
    uint64_t last_target, seq;
    pkt_t *heap; size_t hn, hcap;
    uint64_t in_p, in_b, out_p, out_b, drop_loss, drop_ge, corrupted, corrupt_skipped, reordered;
    uint64_t verdict_errors;
    hist_t hdelay, herr, hdraw; /* added (release - arrival), release error, drawn delay */
    FILE *pktlog;
    ring_t log;
    /* trace */
    step_t *steps; size_t nsteps, next_step; int trace_loop; uint64_t trace_period_ns;
    int64_t trace_start_rt; uint64_t trace_cycle;
} queue_t;

static queue_t Q[MAXQ];
static int nq;
static struct mnl_socket *nl;
static unsigned portid;
static const char *stats_path, *params_path;
static uint64_t stats_interval_ns = 1000000000ULL, spin_ns = 150000, start_mono;
/* how late timed sleeps end (ns, EWMA 1/8) and the most a dense release wakes early by it */
static int64_t wake_late_ns;
static uint64_t wake_lead_max_ns = 25000;
/* --spin-dense: no sleep at all while the next release is within this (--spin-dense-us), as
   long as the helper has slept a tenth of its time: credit = 9 x time asleep - time awake,
   in [-100 ms, 100 ms]; at or below 0 it sleeps again before releases as without it */
static uint64_t spin_dense_ns = 2000000;
static int64_t dense_credit_ns;
#define DENSE_CREDIT_MAX 100000000LL
static void dense_credit(int64_t d) {
    dense_credit_ns += d;
    if (dense_credit_ns > DENSE_CREDIT_MAX) dense_credit_ns = DENSE_CREDIT_MAX;
    if (dense_credit_ns < -DENSE_CREDIT_MAX) dense_credit_ns = -DENSE_CREDIT_MAX;
}
static pid_t parent_pid;
static int rt_prio, nice_val, cpu = -1;
static bool spin_dense;
static char sendbuf[SEND_BUF + 70000];
static size_t sendlen;
static uint64_t send_errors, recv_enobufs;
/* the loop's own cost: syscalls and wake-ups (per packet: divide by the queues' in_packets) */
static uint64_t recv_calls, recv_msgs, send_calls, verdict_msgs, epoll_wakeups, timer_wakeups;
static uint64_t last_release, coalesce_ns;

static void die(int q, const char *call, const char *fmt, ...) {
    va_list ap; int e = errno;
    fprintf(stderr, "aitb-delayline: queue %d: %s failed: %s", q, call, strerror(e));
    if (fmt) { fputs(": ", stderr); va_start(ap, fmt); vfprintf(stderr, fmt, ap); va_end(ap); }
    fputc('\n', stderr);
    exit(1);
}
/* while a SIGHUP re-reads the params file, a bad value is refused (the old parameters stay)
   instead of ending the helper: usage_die jumps back into reload_params */
static jmp_buf reload_jmp;
static bool reloading;
static void usage_die(const char *fmt, ...) {
    va_list ap; va_start(ap, fmt);
    fputs(reloading ? "aitb-delayline: params: refused: " : "aitb-delayline: ", stderr);
    vfprintf(stderr, fmt, ap); fputc('\n', stderr); fflush(stderr);
    va_end(ap);
    if (reloading) longjmp(reload_jmp, 1);
    exit(2);
}
static uint64_t mono(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}
static int64_t realt(void) {
    struct timespec t; clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* ---------- parsing: "num=1,delay_us=10000,jitter_us=0,dist=normal,..." ---------- */
static double num_arg(const char *k, const char *v, double lo, double hi) {
    char *end; errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || !(d >= lo && d <= hi))
        usage_die("bad value for %s: '%s' (expected a number in [%g, %g])", k, v, lo, hi);
    return d;
}
static void load_trace(queue_t *q, const char *path);

/* apply "k=v,k=v" to q (q->num must already be set for a new queue) */
static void parse_spec(queue_t *q, char *spec, bool live) {
    char *save = NULL;
    for (char *tok = strtok_r(spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) usage_die("queue %d: '%s' is not key=value", q->num, tok);
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        params_t *p = &q->p;
        if (!strcmp(k, "num")) { if (!live) q->num = (uint16_t)num_arg(k, v, 0, 65535); }
        else if (!strcmp(k, "delay_us")) p->delay_ns = (uint64_t)(num_arg(k, v, 0, 1e9) * 1000);
        else if (!strcmp(k, "jitter_us")) p->jitter_ns = (uint64_t)(num_arg(k, v, 0, 1e9) * 1000);
        else if (!strcmp(k, "dist")) {
            int d = -1;
            for (int i = 0; i < 4; i++) if (!strcmp(v, dist_names[i])) d = i;
            if (d < 0) usage_die("queue %d: unknown dist '%s' (uniform, normal, pareto, paretonormal)", q->num, v);
            p->dist = d;
        }
        else if (!strcmp(k, "reorder_ok")) p->reorder_ok = (int)num_arg(k, v, 0, 1);
        else if (!strcmp(k, "loss_pct")) p->loss_pct = num_arg(k, v, 0, 100);
        else if (!strcmp(k, "ge_p")) p->ge_p = num_arg(k, v, 0, 100);
        else if (!strcmp(k, "ge_r")) p->ge_r = num_arg(k, v, 0, 100);
        else if (!strcmp(k, "ge_1h")) p->ge_1h = num_arg(k, v, 0, 100);
        else if (!strcmp(k, "ge_1k")) p->ge_1k = num_arg(k, v, 0, 100);
        else if (!strcmp(k, "reorder_pct")) p->reorder_pct = num_arg(k, v, 0, 100);
        else if (!strcmp(k, "reorder_gap")) p->reorder_gap = (uint32_t)num_arg(k, v, 0, 1e9);
        else if (!strcmp(k, "corrupt_pct")) {
            double c = num_arg(k, v, 0, 100);
            if (live && (c > 0) != (p->corrupt_pct > 0))
                usage_die("queue %d: corrupt on/off changes the copy mode; restart the helper", q->num);
            p->corrupt_pct = c;
        }
        else if (!strcmp(k, "duplicate_pct")) {
            if (num_arg(k, v, 0, 100) > 0)
                usage_die("queue %d: duplicate is not supported: an NFQUEUE verdict can accept or "
                          "drop a packet but cannot emit a second copy of it", q->num);
        }
        else if (!strcmp(k, "seed")) {
            if (!live) p->seed = strtoull(v, NULL, 0);
        }
        else if (!strcmp(k, "maxlen")) p->maxlen = (uint32_t)num_arg(k, v, 1, 1e8);
        else if (!strcmp(k, "pktlog")) {
            if (live) continue;
            q->pktlog = fopen(v, "w");
            if (!q->pktlog) die(q->num, "fopen", "pktlog %s", v);
            setvbuf(q->pktlog, NULL, _IOFBF, 1 << 20);
            q->log.buf = malloc(LOGRING * sizeof(logrec_t));
            if (!q->log.buf) die(q->num, "malloc(pktlog ring)", NULL);
            memset(q->log.buf, 0, LOGRING * sizeof(logrec_t));  /* fault its pages in now */
        }
        else if (!strcmp(k, "trace")) load_trace(q, v);
        else if (!strcmp(k, "trace_start_ns")) q->trace_start_rt = (int64_t)strtoll(v, NULL, 10);
        else if (!strcmp(k, "trace_loop")) q->trace_loop = (int)num_arg(k, v, 0, 1);
        else if (!strcmp(k, "trace_period_us"))
            q->trace_period_ns = (uint64_t)(num_arg(k, v, 1, 1e15) * 1000);
        else usage_die("queue %d: unknown parameter '%s'", q->num, k);
    }
    if (q->p.reorder_pct > 0 && q->p.reorder_gap == 0) q->p.reorder_gap = 1;
}

/* trace file: lines "t_offset_us delay_us loss_pct [jitter_us]", '#' comments */
static void load_trace(queue_t *q, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) die(q->num, "fopen", "trace %s", path);
    char line[256]; size_t cap = 0;
    free(q->steps); q->steps = NULL; q->nsteps = 0; q->next_step = 0; q->trace_cycle = 0;
    while (fgets(line, sizeof line, f)) {
        char *h = strchr(line, '#'); if (h) *h = 0;
        double off, d, l, j = -1;
        int n = sscanf(line, "%lf %lf %lf %lf", &off, &d, &l, &j);
        if (n <= 0) continue;
        if (n < 3 || off < 0 || d < 0 || l < 0 || l > 100)
            usage_die("queue %d: trace %s: bad line '%s'", q->num, path, line);
        if (q->nsteps == cap) { cap = cap ? cap * 2 : 64; q->steps = realloc(q->steps, cap * sizeof(step_t)); }
        if (q->nsteps && (uint64_t)(off * 1000) < q->steps[q->nsteps - 1].off_ns)
            usage_die("queue %d: trace %s: offsets must not decrease", q->num, path);
        q->steps[q->nsteps++] = (step_t){(uint64_t)(off * 1000), (uint64_t)(d * 1000), l,
                                         n == 4 ? (int64_t)(j * 1000) : -1};
    }
    fclose(f);
}

/* ---------- netlink ---------- */
/* time inside each sendto of verdicts: the kernel re-injects every accepted packet in this
   call (nf_reinject runs the rest of the receive path, and whatever it sends, before it
   returns), so a long call delays every release due meanwhile */
static hist_t hsend;
static void flush_send(void) {
    if (!sendlen) return;
    send_calls++;
    uint64_t t0 = mono();
    if (mnl_socket_sendto(nl, sendbuf, sendlen) < 0) {
        if (errno == ENOBUFS || errno == EAGAIN) send_errors++;
        else die(-1, "sendto(verdicts)", NULL);
    }
    hadd(&hsend, mono() - t0);
    sendlen = 0;
}
static struct nlmsghdr *msg_put(int type, uint16_t qnum) {
    if (sendlen > SEND_BUF) flush_send();
    struct nlmsghdr *nlh = nfq_nlmsg_put(sendbuf + sendlen, type, qnum);
    return nlh;
}
static void msg_done(struct nlmsghdr *nlh) { sendlen += NLMSG_ALIGN(nlh->nlmsg_len); verdict_msgs++; }

static uint32_t ack_seq = 1000, want_seq;
static int ack_seen, ack_err;
static int recv_some(int fd, int max);

/* bind (at start) and set copy mode, flags and maxlen; at start wait for the kernel's ack,
 * handing any packet that arrives meanwhile to the normal path (none may be left unanswered) */
static void config_queue(queue_t *q, bool bind) {
    char buf[1024]; size_t len = 0;
    struct nlmsghdr *nlh;
    if (bind) {
        nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, q->num);
        nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
        nlh->nlmsg_flags |= NLM_F_ACK; nlh->nlmsg_seq = ++ack_seq;
        len += NLMSG_ALIGN(nlh->nlmsg_len);
    }
    bool corrupt = q->p.corrupt_pct > 0;
    nlh = nfq_nlmsg_put(buf + len, NFQNL_MSG_CONFIG, q->num);
    nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET, corrupt ? 0xffff : COPY_SMALL);
    /* GSO: queue GSO/GRO packets whole -- except when corrupting, which needs whole payloads.
     * FAIL_OPEN is in the mask and cleared: a dead helper must not pass packets undelayed. */
    uint32_t flags = corrupt ? 0 : NFQA_CFG_F_GSO;
    mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(flags));
    mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN));
    if (q->p.maxlen) nfq_nlmsg_cfg_put_qmaxlen(nlh, q->p.maxlen);
    nlh->nlmsg_flags |= NLM_F_ACK; nlh->nlmsg_seq = ++ack_seq;
    len += NLMSG_ALIGN(nlh->nlmsg_len);
    if (mnl_socket_sendto(nl, buf, len) < 0) die(q->num, "sendto(NFQNL_MSG_CONFIG)", NULL);
    if (!bind) return;             /* live: on_error reports a failure */
    uint32_t first = bind ? ack_seq - 1 : ack_seq;
    for (uint32_t s = first; s <= ack_seq; s++) {
        want_seq = s; ack_seen = 0;
        while (!ack_seen) {
            struct pollfd pf = {.fd = mnl_socket_get_fd(nl), .events = POLLIN};
            int r = poll(&pf, 1, 2000);
            if (r < 0) die(q->num, "poll(config ack)", NULL);
            if (r == 0) { errno = ETIMEDOUT; die(q->num, "wait for NFQNL_MSG_CONFIG ack", NULL); }
            recv_some(pf.fd, 1);
        }
        if (ack_err) {
            errno = -ack_err;
            die(q->num, s == first && bind ? "NFQNL_CFG_CMD_BIND" : "NFQNL_MSG_CONFIG(params)",
                s == first && bind ? "is another process bound to this queue?" : NULL);
        }
    }
}

/* ---------- heap of held packets, keyed (target, seq) ---------- */
static inline bool pless(const pkt_t *a, const pkt_t *b) {
    return a->target < b->target || (a->target == b->target && a->seq < b->seq);
}
static void hpush(queue_t *q, pkt_t p) {
    if (q->hn == q->hcap) {
        q->hcap = q->hcap ? q->hcap * 2 : 4096;
        q->heap = realloc(q->heap, q->hcap * sizeof(pkt_t));
        if (!q->heap) die(q->num, "realloc(heap)", NULL);
    }
    size_t i = q->hn++;
    while (i) {
        size_t par = (i - 1) / 2;
        if (!pless(&p, &q->heap[par])) break;
        q->heap[i] = q->heap[par]; i = par;
    }
    q->heap[i] = p;
}
static pkt_t hpop(queue_t *q) {
    pkt_t top = q->heap[0], last = q->heap[--q->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->hn) break;
        if (c + 1 < q->hn && pless(&q->heap[c + 1], &q->heap[c])) c++;
        if (!pless(&q->heap[c], &last)) break;
        q->heap[i] = q->heap[c]; i = c;
    }
    if (q->hn) q->heap[i] = last;
    return top;
}

static uint64_t pktlog_waits;
static void log_pkt(queue_t *q, const pkt_t *p, uint64_t release) {
    if (!q->pktlog) return;
    uint64_t h = atomic_load_explicit(&q->log.head, memory_order_relaxed);
    if (h - atomic_load_explicit(&q->log.tail, memory_order_acquire) >= LOGRING) {
        pktlog_waits++;   /* the writer is behind by a whole ring: wait, never lose a record */
        while (h - atomic_load_explicit(&q->log.tail, memory_order_acquire) >= LOGRING)
            sched_yield();
    }
    q->log.buf[h % LOGRING] = (logrec_t){p->arrival, p->target, release, p->len, p->flags};
    atomic_store_explicit(&q->log.head, h + 1, memory_order_release);
}

static void verdict_one(queue_t *q, const pkt_t *p, int verdict) {
    struct nlmsghdr *nlh = msg_put(NFQNL_MSG_VERDICT, q->num);
    nfq_nlmsg_verdict_put(nlh, (int)p->id, verdict);
    if (p->data) nfq_nlmsg_verdict_put_pkt(nlh, p->data, p->caplen);
    msg_done(nlh);
}
static void account_out(queue_t *q, pkt_t *p, uint64_t now) {
    q->out_p++; q->out_b += p->len;
    hadd(&q->hdelay, now - p->arrival);
    hadd(&q->herr, now > p->target ? now - p->target : 0);
    log_pkt(q, p, now);
    free(p->data); p->data = NULL;
}

/* release every packet of q due at `now`; in-order queues get one batch verdict per run */
static void release_due(queue_t *q, uint64_t now) {
    bool have_batch = false; uint32_t batch_id = 0;
    if (q->hn && q->heap[0].target <= now) last_release = now;
    while (q->hn && q->heap[0].target <= now) {
        pkt_t p = hpop(q);
        if (!q->p.reorder_ok && !p.data) { have_batch = true; batch_id = p.id; }
        else {
            if (have_batch) {
                struct nlmsghdr *nlh = msg_put(NFQNL_MSG_VERDICT_BATCH, q->num);
                nfq_nlmsg_verdict_put(nlh, (int)batch_id, NF_ACCEPT); msg_done(nlh);
                have_batch = false;
            }
            verdict_one(q, &p, NF_ACCEPT);
        }
        account_out(q, &p, now);
    }
    if (have_batch) {
        struct nlmsghdr *nlh = msg_put(NFQNL_MSG_VERDICT_BATCH, q->num);
        nfq_nlmsg_verdict_put(nlh, (int)batch_id, NF_ACCEPT); msg_done(nlh);
    }
}

/* the smallest delay a packet arriving now may get on any queue: its release cannot come
   sooner than that after its arrival */
static uint64_t min_new_delay(void) {
    uint64_t m = UINT64_MAX;
    for (int i = 0; i < nq; i++) {
        const params_t *p = &Q[i].p;
        uint64_t d = p->delay_ns;
        if (p->reorder_pct > 0) d = 0;                         /* sent at once */
        else if (p->jitter_ns && p->dist == D_UNIFORM) d = d > p->jitter_ns ? d - p->jitter_ns : 0;
        else if (p->jitter_ns) d = 0;                          /* unbounded below (clamped at 0) */
        if (d < m) m = d;
    }
    return m;
}

static queue_t *find_queue(unsigned num) {
    for (int i = 0; i < nq; i++) if (Q[i].num == num) return &Q[i];
    return NULL;
}

static double draw_jitter(queue_t *q) {
    switch (q->p.dist) {
    case D_UNIFORM: return 2.0 * rng_u01(&q->r_jit) - 1.0;
    case D_NORMAL: return rng_normal(&q->r_jit);
    case D_PARETO: return rng_pareto_std(&q->r_jit);
    default: return (0.25 * rng_normal(&q->r_jit) + 0.75 * rng_pareto_std(&q->r_jit)) / sqrt(0.625);
    }
}

static uint64_t now_cached;
/* arrivals timed by the kernel's stamp / by this process's read (no usable stamp), and when
   the last of the latter came: reads are deferred only while every arrival is stamped */
static uint64_t arrivals_stamped, arrivals_read, last_unstamped;
static int64_t rt_minus_mono; /* CLOCK_REALTIME - CLOCK_MONOTONIC when now_cached was read */
/* arrival = the kernel's receive timestamp (skb->tstamp, set when the packet entered the
   namespace's stack, CLOCK_REALTIME in microseconds) where there is one, else the time this
   process read the packet: the wake-up of this process (a cross-CPU wake-up costs 0.1-0.2 ms
   in a VM) then no longer adds to the delay. A stamp in the future or older than 1 s
   (clock steps) is not trusted. */
static uint64_t arrival_of(struct nlattr *ts) {
    if (!ts || mnl_attr_get_payload_len(ts) < sizeof(struct nfqnl_msg_packet_timestamp)) {
        arrivals_read++; last_unstamped = now_cached;
        return now_cached;
    }
    struct nfqnl_msg_packet_timestamp *t = mnl_attr_get_payload(ts);
    int64_t rt = (int64_t)be64toh(t->sec) * 1000000000LL + (int64_t)be64toh(t->usec) * 1000LL;
    int64_t mono_ns = rt - rt_minus_mono;
    if (mono_ns <= 0 || (uint64_t)mono_ns > now_cached || now_cached - (uint64_t)mono_ns > 1000000000ULL) {
        arrivals_read++; last_unstamped = now_cached;
        return now_cached;
    }
    arrivals_stamped++;
    return (uint64_t)mono_ns;
}
static int on_packet(const struct nlmsghdr *nlh, void *data) {
    (void)data;
    struct nlattr *attr[NFQA_MAX + 1] = {0};
    if (nfq_nlmsg_parse(nlh, attr) < 0) { errno = EINVAL; die(-1, "nfq_nlmsg_parse", NULL); }
    struct nfgenmsg *nfg = mnl_nlmsg_get_payload(nlh);
    unsigned qnum = ntohs(nfg->res_id);
    queue_t *q = find_queue(qnum);
    if (!q || !attr[NFQA_PACKET_HDR]) return MNL_CB_OK;
    struct nfqnl_msg_packet_hdr *ph = mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
    pkt_t p = {0};
    p.id = ntohl(ph->packet_id);
    p.arrival = arrival_of(attr[NFQA_TIMESTAMP]);
    p.seq = q->seq++;
    p.caplen = attr[NFQA_PAYLOAD] ? mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]) : 0;
    p.len = attr[NFQA_CAP_LEN] ? ntohl(mnl_attr_get_u32(attr[NFQA_CAP_LEN])) : p.caplen;
    q->in_p++; q->in_b += p.len;

    /* decisions, each from its own stream so one knob does not shift another's pattern */
    bool drop = false;
    double u_loss = rng_u01(&q->r_loss);
    if (q->p.loss_pct > 0 && u_loss * 100.0 < q->p.loss_pct) { drop = true; p.flags |= F_LOSS; q->drop_loss++; }
    if (q->p.ge_p > 0 || q->p.ge_1k > 0 || q->ge_bad) {
        double u1 = rng_u01(&q->r_ge), u2 = rng_u01(&q->r_ge);
        double lossp = q->ge_bad ? q->p.ge_1h : q->p.ge_1k;
        if (u1 * 100.0 < lossp) { if (!drop) { q->drop_ge++; p.flags |= F_GE; } drop = true; }
        if (!q->ge_bad && u2 * 100.0 < q->p.ge_p) q->ge_bad = 1;
        else if (q->ge_bad && u2 * 100.0 < q->p.ge_r) q->ge_bad = 0;
    }
    double u_cor = rng_u01(&q->r_cor);
    uint64_t bitsel = rng_next(&q->r_cor);
    double u_reo = rng_u01(&q->r_reo);
    if (drop) {
        verdict_one(q, &p, NF_DROP);
        log_pkt(q, &p, 0);
        return MNL_CB_OK;
    }
    if (q->p.corrupt_pct > 0 && u_cor * 100.0 < q->p.corrupt_pct) {
        if (p.caplen == p.len && p.caplen > 0) {
            p.data = malloc(p.caplen);
            if (!p.data) die(q->num, "malloc(corrupt copy)", NULL);
            memcpy(p.data, mnl_attr_get_payload(attr[NFQA_PAYLOAD]), p.caplen);
            uint64_t bit = bitsel % ((uint64_t)p.caplen * 8);
            p.data[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            p.flags |= F_CORRUPT; q->corrupted++;
        } else q->corrupt_skipped++;
    }
    if (q->p.reorder_gap && q->reo_count >= q->p.reorder_gap - 1 && u_reo * 100.0 < q->p.reorder_pct) {
        q->reo_count = 0; q->reordered++; p.flags |= F_REORDER;
        p.target = p.arrival;
        verdict_one(q, &p, NF_ACCEPT);
        account_out(q, &p, now_cached);
        return MNL_CB_OK;
    }
    if (q->p.reorder_gap) q->reo_count++;
    int64_t t = (int64_t)q->p.delay_ns;
    if (q->p.jitter_ns) t += (int64_t)llround(draw_jitter(q) * (double)q->p.jitter_ns);
    if (t < 0) t = 0;
    hadd(&q->hdraw, (uint64_t)t);               /* before FIFO order's wait for earlier ones */
    p.target = p.arrival + (uint64_t)t;
    if (!q->p.reorder_ok) {
        if (p.target < q->last_target) p.target = q->last_target;
        q->last_target = p.target;
    }
    if (p.target <= now_cached && !q->hn) {       /* zero delay: pass at once */
        if (p.data) verdict_one(q, &p, NF_ACCEPT);
        else { struct nlmsghdr *nlh = msg_put(NFQNL_MSG_VERDICT_BATCH, q->num);
               nfq_nlmsg_verdict_put(nlh, (int)p.id, NF_ACCEPT); msg_done(nlh); }
        account_out(q, &p, now_cached);
        return MNL_CB_OK;
    }
    hpush(q, p);
    return MNL_CB_OK;
}

/* error messages from the kernel (verdict for an unknown id etc.) */
static int on_error(const struct nlmsghdr *nlh, void *data) {
    (void)data;
    const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
    if (want_seq && nlh->nlmsg_seq == want_seq) { ack_seen = 1; ack_err = e->error; return MNL_CB_OK; }
    if (e->error) {
        send_errors++;
        static int shown;
        if (shown++ < 5) fprintf(stderr, "aitb-delayline: kernel rejected a message: %s\n", strerror(-e->error));
    }
    return MNL_CB_OK;
}

#define RBATCH 64
#define SPIN_GAP 10
/* a timed sleep to `until` ended now: fold its lateness into wake_late_ns (EWMA 1/8; a
   lateness above 1 ms, a preemption rather than a wake-up, is left out) */
static void note_lateness(uint64_t until) {
    int64_t late = (int64_t)(mono() - until);
    if (late < 0 || late > 1000000) return;
    wake_late_ns += (late - wake_late_ns) / 8;
}
static char *rbufs;   /* RBATCH slots of rslot bytes */
static size_t rslot = RECV_BUF;
/* read up to `max` messages without blocking (recvmmsg, RBATCH per call); returns how many */
static int recv_some(int fd, int max) {
    static mnl_cb_t ctl[NLMSG_MIN_TYPE] = {[NLMSG_ERROR] = on_error};
    static struct mmsghdr mm[RBATCH];
    static struct iovec iov[RBATCH];
    int n = 0;
    while (n < max) {
        int want = max - n < RBATCH ? max - n : RBATCH;
        for (int i = 0; i < want; i++) {
            iov[i] = (struct iovec){rbufs + (size_t)i * rslot, rslot};
            mm[i].msg_hdr = (struct msghdr){.msg_iov = &iov[i], .msg_iovlen = 1};
        }
        int r = recvmmsg(fd, mm, (unsigned)want, MSG_DONTWAIT, NULL);
        recv_calls++;
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR) break;
            if (errno == ENOBUFS) { recv_enobufs++; continue; }
            die(-1, "recvmmsg(nfqueue socket)", NULL);
        }
        now_cached = mono();
        rt_minus_mono = realt() - (int64_t)now_cached;
        recv_msgs += (uint64_t)(r > 0 ? r : 0);
        for (int i = 0; i < r; i++) {
            /* a cut message would leave its packet without a verdict (held until exit) */
            if (mm[i].msg_hdr.msg_flags & MSG_TRUNC) {
                errno = EMSGSIZE;
                die(-1, "recvmmsg(nfqueue socket)", "message of %u bytes cut to the %zu-byte slot",
                    mm[i].msg_len, rslot);
            }
            if (mnl_cb_run2(rbufs + (size_t)i * rslot, mm[i].msg_len, 0, portid, on_packet, NULL, ctl, NLMSG_MIN_TYPE) < 0)
                if (errno != ENOENT && errno != EINVAL) send_errors++;
        }
        n += r;
        if (r < want) break;
    }
    return n;
}

/* ---------- trace steps ---------- */
static void trace_tick(queue_t *q, int64_t rt) {
    if (!q->nsteps || !q->trace_start_rt) return;
    for (;;) {
        if (q->next_step >= q->nsteps) {
            if (!q->trace_loop || !q->trace_period_ns) return;
            q->next_step = 0; q->trace_cycle++;
        }
        step_t *s = &q->steps[q->next_step];
        int64_t at = q->trace_start_rt + (int64_t)(q->trace_cycle * q->trace_period_ns + s->off_ns);
        if (at > rt) return;
        q->p.delay_ns = s->delay_ns; q->p.loss_pct = s->loss_pct;
        if (s->jitter_ns >= 0) q->p.jitter_ns = (uint64_t)s->jitter_ns;
        q->next_step++;
    }
}
static int64_t trace_next_rt(queue_t *q) {
    if (!q->nsteps || !q->trace_start_rt) return INT64_MAX;
    size_t i = q->next_step; uint64_t cyc = q->trace_cycle;
    if (i >= q->nsteps) { if (!q->trace_loop || !q->trace_period_ns) return INT64_MAX; i = 0; cyc++; }
    return q->trace_start_rt + (int64_t)(cyc * q->trace_period_ns + q->steps[i].off_ns);
}

/* ---------- stats ---------- */
static void read_kernel_stats(unsigned num, long long out[3]) {
    out[0] = out[1] = out[2] = -1;
    FILE *f = fopen("/proc/net/netfilter/nfnetlink_queue", "r");
    if (!f) return;
    unsigned qn, pid, total, mode, range, dropped, udropped, idseq, one;
    while (fscanf(f, "%u %u %u %u %u %u %u %u %u", &qn, &pid, &total, &mode, &range, &dropped,
                  &udropped, &idseq, &one) == 9) {
        if (qn == num) { out[0] = total; out[1] = dropped; out[2] = udropped; break; }
    }
    fclose(f);
}
static void write_hist(FILE *f, const char *name, const hist_t *h) {
    fprintf(f, "\"%s\":{\"n\":%" PRIu64 ",\"mean_us\":%.3f,\"min_us\":%.3f,\"p50_us\":%.3f,"
               "\"p90_us\":%.3f,\"p99_us\":%.3f,\"p999_us\":%.3f,\"max_us\":%.3f}",
            name, h->n, h->n ? h->sum / (double)h->n / 1e3 : 0.0, (double)h->min / 1e3,
            hpct(h, .5) / 1e3, hpct(h, .9) / 1e3, hpct(h, .99) / 1e3, hpct(h, .999) / 1e3,
            (double)h->max / 1e3);
}
/* what a stats file reports, copied by the loop (a memcpy: tens of us per queue) so that the
   writer thread formats and writes it -- fopen, /proc reads, rename and the pktlog writes took
   0.3-5 ms in the loop, late releases for every packet due meanwhile */
typedef struct {
    uint64_t now, send_errors, recv_enobufs, recv_calls, recv_msgs, send_calls, verdict_msgs,
        epoll_wakeups, timer_wakeups, arrivals_stamped, arrivals_read, pktlog_waits;
    int64_t wake_lead_ns;
    bool final;
    hist_t hsend;
} snap_t;
static snap_t SNAP;
static queue_t SQ[MAXQ];
static void take_snapshot(bool final) {
    SNAP = (snap_t){mono(), send_errors, recv_enobufs, recv_calls, recv_msgs, send_calls,
                    verdict_msgs, epoll_wakeups, timer_wakeups, arrivals_stamped, arrivals_read,
                    pktlog_waits,
                    wake_lead_max_ns && wake_late_ns > 0 ? (wake_late_ns < (int64_t)wake_lead_max_ns ? wake_late_ns : (int64_t)wake_lead_max_ns) : 0,
                    final, hsend};
    memcpy(SQ, Q, (size_t)nq * sizeof(queue_t));
}
static void write_snapshot(void) {
    if (!stats_path) return;
    const snap_t *S = &SNAP;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", stats_path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) die(-1, "fopen(stats tmp)", "%s", tmp);
    struct rusage ru; getrusage(RUSAGE_SELF, &ru);
    double cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    fprintf(f, "{\"pid\":%d,\"final\":%s,\"clock\":\"CLOCK_MONOTONIC\",\"uptime_s\":%.6f,"
               "\"cpu_s\":%.6f,\"cpu_user_s\":%.6f,\"cpu_sys_s\":%.6f,\"send_errors\":%" PRIu64
               ",\"recv_enobufs\":%" PRIu64 ",\"recv_calls\":%" PRIu64 ",\"recv_msgs\":%" PRIu64
               ",\"send_calls\":%" PRIu64 ",\"verdict_msgs\":%" PRIu64 ",\"epoll_wakeups\":%" PRIu64
               ",\"timer_wakeups\":%" PRIu64 ",\"arrivals_stamped\":%" PRIu64
               ",\"arrivals_read\":%" PRIu64 ",\"wake_lead_ns\":%" PRId64
               ",\"pktlog_waits\":%" PRIu64 ",",
            (int)getpid(), S->final ? "true" : "false", (double)(S->now - start_mono) / 1e9, cpu_s,
            ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
            S->send_errors, S->recv_enobufs, S->recv_calls, S->recv_msgs, S->send_calls,
            S->verdict_msgs, S->epoll_wakeups, S->timer_wakeups, S->arrivals_stamped,
            S->arrivals_read, S->wake_lead_ns, S->pktlog_waits);
    write_hist(f, "verdict_send", &S->hsend);
    fputs(",\"queues\":[", f);
    for (int i = 0; i < nq; i++) {
        const queue_t *q = &SQ[i];
        long long k[3]; read_kernel_stats(q->num, k);
        fprintf(f, "%s{\"num\":%u,\"delay_us\":%.3f,\"jitter_us\":%.3f,\"dist\":\"%s\",\"reorder_ok\":%d,"
                   "\"loss_pct\":%g,\"ge\":[%g,%g,%g,%g],\"reorder_pct\":%g,\"reorder_gap\":%u,"
                   "\"corrupt_pct\":%g,\"maxlen\":%u,\"seed\":%" PRIu64 ",",
                i ? "," : "", q->num, q->p.delay_ns / 1e3, q->p.jitter_ns / 1e3, dist_names[q->p.dist],
                q->p.reorder_ok, q->p.loss_pct, q->p.ge_p, q->p.ge_r, q->p.ge_1h, q->p.ge_1k,
                q->p.reorder_pct, q->p.reorder_gap, q->p.corrupt_pct, q->p.maxlen, q->p.seed);
        fprintf(f, "\"in_packets\":%" PRIu64 ",\"in_bytes\":%" PRIu64 ",\"out_packets\":%" PRIu64
                   ",\"out_bytes\":%" PRIu64 ",\"dropped_loss\":%" PRIu64 ",\"dropped_ge\":%" PRIu64
                   ",\"corrupted\":%" PRIu64 ",\"corrupt_skipped\":%" PRIu64 ",\"reordered\":%" PRIu64
                   ",\"held\":%zu,\"kernel_queue_total\":%lld,\"kernel_queue_dropped\":%lld,"
                   "\"kernel_user_dropped\":%lld,",
                q->in_p, q->in_b, q->out_p, q->out_b, q->drop_loss, q->drop_ge, q->corrupted,
                q->corrupt_skipped, q->reordered, q->hn, k[0], k[1], k[2]);
        write_hist(f, "added_delay", &q->hdelay); fputc(',', f);
        write_hist(f, "release_error", &q->herr); fputc(',', f);
        write_hist(f, "drawn_delay", &q->hdraw); fputc('}', f);
    }
    fputs("]}\n", f);
    if (fflush(f) || fclose(f)) die(-1, "write(stats tmp)", "%s", tmp);
    if (rename(tmp, stats_path) < 0) die(-1, "rename(stats)", "%s", stats_path);
}

/* ---------- the writer thread: stats files and the pktlog, off the loop's CPU ---------- */
static pthread_t writer;
static bool writer_on;
static _Atomic int stats_pending, writer_stop;
static cpu_set_t writer_cpus;   /* the CPUs this process could use, less --cpu */
static int writer_ncpus;
static void drain_logs(void) {
    for (int i = 0; i < nq; i++) {
        queue_t *q = &Q[i];
        if (!q->pktlog) continue;
        uint64_t t = atomic_load_explicit(&q->log.tail, memory_order_relaxed);
        uint64_t h = atomic_load_explicit(&q->log.head, memory_order_acquire);
        if (t == h) continue;
        while (t < h) {
            uint64_t off = t % LOGRING, n = h - t;
            if (n > LOGRING - off) n = LOGRING - off;
            if (fwrite(q->log.buf + off, sizeof(logrec_t), n, q->pktlog) != n) die(q->num, "fwrite(pktlog)", NULL);
            t += n;
            atomic_store_explicit(&q->log.tail, t, memory_order_release);
        }
        if (fflush(q->pktlog)) die(q->num, "fflush(pktlog)", NULL);
    }
}
static void *writer_main(void *arg) {
    (void)arg;
    for (;;) {
        int stop = atomic_load(&writer_stop);   /* before the drain: records until now go out */
        drain_logs();
        if (atomic_load_explicit(&stats_pending, memory_order_acquire)) {
            write_snapshot();
            atomic_store_explicit(&stats_pending, 0, memory_order_release);
        }
        if (stop) return NULL;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}
/* SCHED_OTHER (not the loop's SCHED_FIFO), on the CPUs other than --cpu */
static void start_writer(void) {
    bool logs = false;
    for (int i = 0; i < nq; i++) if (Q[i].pktlog) logs = true;
    if (!stats_path && !logs) return;
    pthread_attr_t at;
    struct sched_param sp = {.sched_priority = 0};
    pthread_attr_init(&at);
    pthread_attr_setinheritsched(&at, PTHREAD_EXPLICIT_SCHED);
    pthread_attr_setschedpolicy(&at, SCHED_OTHER);
    pthread_attr_setschedparam(&at, &sp);
    if (writer_ncpus) pthread_attr_setaffinity_np(&at, sizeof writer_cpus, &writer_cpus);
    int e = pthread_create(&writer, &at, writer_main, NULL);
    pthread_attr_destroy(&at);
    if (e) { errno = e; die(-1, "pthread_create(stats/pktlog writer)", NULL); }
    writer_on = true;
}
/* a stats file soon (the writer's next round, <= 5 ms); skipped while the last is unwritten */
static void request_stats(void) {
    if (!stats_path) return;
    if (!writer_on) { take_snapshot(false); write_snapshot(); return; }
    if (atomic_load_explicit(&stats_pending, memory_order_acquire)) return;
    take_snapshot(false);
    atomic_store_explicit(&stats_pending, 1, memory_order_release);
}
/* at exit: the writer finishes (every pktlog record written), then the final stats */
static void finish(void) {
    if (writer_on) {
        atomic_store(&writer_stop, 1);
        pthread_join(writer, NULL);
        writer_on = false;
    } else drain_logs();
    take_snapshot(true);
    write_snapshot();
    for (int i = 0; i < nq; i++) if (Q[i].pktlog && fclose(Q[i].pktlog)) die(Q[i].num, "fclose(pktlog)", NULL);
}

static void reload_params(void) {
    if (!params_path) { fprintf(stderr, "aitb-delayline: SIGHUP without --params: ignored\n"); return; }
    FILE *f = fopen(params_path, "r");
    if (!f) {
        fprintf(stderr, "aitb-delayline: params: refused: fopen(%s) failed: %s (params kept)\n",
                params_path, strerror(errno));
        fflush(stderr); return;
    }
    static params_t saved[MAXQ];
    static uint32_t oldmax[MAXQ];
    for (int i = 0; i < nq; i++) { saved[i] = Q[i].p; oldmax[i] = Q[i].p.maxlen; }
    char line[4096];
    reloading = true;
    if (setjmp(reload_jmp)) {  /* a bad value: every queue keeps its old parameters */
        for (int i = 0; i < nq; i++) Q[i].p = saved[i];
        reloading = false; fclose(f); return;
    }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n#")] = 0;
        if (!line[0]) continue;
        const char *n = strstr(line, "num=");
        if (!n) usage_die("params line without num=: %s", line);
        queue_t *q = find_queue((unsigned)atoi(n + 4));
        if (!q) usage_die("params for unknown queue: %s", line);
        parse_spec(q, line, true);
    }
    reloading = false;
    fclose(f);
    for (int i = 0; i < nq; i++) if (Q[i].p.maxlen != oldmax[i]) config_queue(&Q[i], false);
    fprintf(stderr, "aitb-delayline: params: ok\n"); fflush(stderr);
}

/* the signals waiting on the (non-blocking) signalfd: SIGHUP reloads the parameters, SIGUSR1
   writes the stats, SIGUSR2 detaches, any other ends the helper (1: exit now, stats written) */
static int take_signals(int sfd) {
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == sizeof si) {
        if (si.ssi_signo == SIGHUP) reload_params();
        else if (si.ssi_signo == SIGUSR1) request_stats();
        else if (si.ssi_signo == SIGUSR2) {
            /* detach (aitb topo deploy leaves the lab up): outlive the parent;
               the lab's registry (pid + start time) still ends this process */
            if (prctl(PR_SET_PDEATHSIG, 0) < 0) die(-1, "prctl(PR_SET_PDEATHSIG, 0)", NULL);
            parent_pid = -1;
            fprintf(stderr, "aitb-delayline: detached\n"); fflush(stderr);
        }
        else {
            finish();
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die(-1, "prctl(PR_SET_PDEATHSIG)", NULL);
    const char *netns = NULL;
    char *specs[MAXQ]; int nspecs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--spin-dense")) { spin_dense = true; continue; }   /* takes no value */
        if (i + 1 >= argc) usage_die("option %s needs a value", a);
        if (!strcmp(a, "--parent-pid")) parent_pid = (pid_t)atoi(argv[++i]);
        else if (!strcmp(a, "--stats")) stats_path = argv[++i];
        else if (!strcmp(a, "--stats-interval-ms")) stats_interval_ns = (uint64_t)(num_arg(a, argv[++i], 1, 1e9) * 1e6);
        else if (!strcmp(a, "--params")) params_path = argv[++i];
        else if (!strcmp(a, "--netns")) netns = argv[++i];
        else if (!strcmp(a, "--rt-prio")) rt_prio = (int)num_arg(a, argv[++i], 0, 99);
        else if (!strcmp(a, "--nice")) nice_val = (int)num_arg(a, argv[++i], -20, 19);
        else if (!strcmp(a, "--cpu")) cpu = (int)num_arg(a, argv[++i], 0, CPU_SETSIZE - 1);
        else if (!strcmp(a, "--coalesce-us")) coalesce_ns = (uint64_t)(num_arg(a, argv[++i], 0, 1e5) * 1000);
        else if (!strcmp(a, "--spin-dense-us")) spin_dense_ns = (uint64_t)(num_arg(a, argv[++i], 0, 1e6) * 1000);
        else if (!strcmp(a, "--spin-us")) spin_ns = (uint64_t)(num_arg(a, argv[++i], 0, 1e5) * 1000);
        else if (!strcmp(a, "--wake-lead-max-us")) wake_lead_max_ns = (uint64_t)(num_arg(a, argv[++i], 0, 1e3) * 1000);
        else if (!strcmp(a, "--queue")) { if (nspecs == MAXQ) usage_die("at most %d queues", MAXQ); specs[nspecs++] = argv[++i]; }
        else usage_die("unknown option %s", a);
    }
    if (!parent_pid) usage_die("--parent-pid is required");
    if (getppid() != parent_pid) {
        fprintf(stderr, "aitb-delayline: parent is %d, not --parent-pid %d: exiting\n", (int)getppid(), (int)parent_pid);
        return 3;
    }
    if (!nspecs) usage_die("no --queue given");
    prctl(PR_SET_TIMERSLACK, 1UL);
    if (nice_val && setpriority(PRIO_PROCESS, 0, nice_val) < 0) die(-1, "setpriority", "--nice %d", nice_val);
    if (sched_getaffinity(0, sizeof writer_cpus, &writer_cpus) < 0) CPU_ZERO(&writer_cpus);
    if (cpu >= 0) CPU_CLR(cpu, &writer_cpus);
    writer_ncpus = CPU_COUNT(&writer_cpus);
    if (cpu >= 0) {  /* a dedicated CPU: the lab's receive processing (RPS) runs on the others */
        cpu_set_t set; CPU_ZERO(&set); CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0) die(-1, "sched_setaffinity", "--cpu %d", cpu);
    }
    if (rt_prio) {   /* SCHED_FIFO: releases on time even when iperf3 and softirqs fill the cores */
        struct sched_param sp = {.sched_priority = rt_prio};
        if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0) die(-1, "sched_setscheduler(SCHED_FIFO)", "--rt-prio %d", rt_prio);
    }
    start_mono = mono();
    for (int i = 0; i < nspecs; i++) {
        queue_t *q = &Q[nq];
        q->num = 0xffff; q->p.maxlen = 0;
        char *s = strdup(specs[i]);
        if (!strstr(s, "num=")) usage_die("--queue '%s' lacks num=", specs[i]);
        parse_spec(q, s, false);
        free(s);
        for (int j = 0; j < nq; j++) if (Q[j].num == q->num) usage_die("queue %u given twice", q->num);
        rng_seed(&q->r_loss, q->p.seed, 1); rng_seed(&q->r_ge, q->p.seed, 2);
        rng_seed(&q->r_jit, q->p.seed, 3); rng_seed(&q->r_cor, q->p.seed, 4);
        rng_seed(&q->r_reo, q->p.seed, 5);
        nq++;
    }
    /* small receive slots (dense in cache) unless a queue copies whole packets (corrupt; it
       cannot be turned on live) */
    rslot = RECV_SMALL;
    for (int i = 0; i < nq; i++) if (Q[i].p.corrupt_pct > 0) rslot = RECV_BUF;
    rbufs = malloc(rslot * RBATCH);
    if (!rbufs) die(-1, "malloc(receive buffers)", NULL);
    if (netns) {
        int fd = open(netns, O_RDONLY | O_CLOEXEC);
        if (fd < 0) die(-1, "open(netns)", "%s", netns);
        if (setns(fd, CLONE_NEWNET) < 0) die(-1, "setns(CLONE_NEWNET)", "%s", netns);
        close(fd);
    }
    sigset_t ss; sigemptyset(&ss);
    sigaddset(&ss, SIGTERM); sigaddset(&ss, SIGINT); sigaddset(&ss, SIGHUP); sigaddset(&ss, SIGUSR1);
    sigaddset(&ss, SIGUSR2);
    if (sigprocmask(SIG_BLOCK, &ss, NULL) < 0) die(-1, "sigprocmask", NULL);
    int sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) die(-1, "signalfd", NULL);

    nl = mnl_socket_open(NETLINK_NETFILTER);
    if (!nl) die(-1, "mnl_socket_open(NETLINK_NETFILTER)", NULL);
    if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) die(-1, "mnl_socket_bind", NULL);
    portid = mnl_socket_get_portid(nl);
    int fd = mnl_socket_get_fd(nl);
    int rcv = 32 << 20, one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) < 0) die(-1, "setsockopt(SO_RCVBUFFORCE)", NULL);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &rcv, sizeof rcv) < 0) die(-1, "setsockopt(SO_SNDBUFFORCE)", NULL);
    if (setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one) < 0) die(-1, "setsockopt(NETLINK_NO_ENOBUFS)", NULL);
    for (int i = 0; i < nq; i++) config_queue(&Q[i], true);
    /* a socket asking for receive timestamps turns the kernel's packet timestamping on
       (net_enable_timestamp: every skb gets tstamp at netif_rx/receive), which NFQUEUE then
       reports as NFQA_TIMESTAMP; it carries no traffic */
    int tsock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (tsock < 0 || setsockopt(tsock, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) < 0)
        die(-1, "socket/setsockopt(SO_TIMESTAMPNS)", NULL);

    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die(-1, "epoll_create1", NULL);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die(-1, "epoll_ctl(nfq)", NULL);
    ev.data.u32 = 1;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev) < 0) die(-1, "epoll_ctl(signalfd)", NULL);
    start_writer();
    fprintf(stderr, "aitb-delayline: pid %d serving %d queue(s)\n", (int)getpid(), nq);

    uint64_t next_stats = mono() + stats_interval_ns, next_parent = mono() + 200000000ULL;
    uint64_t last_signal_check = 0, last_top = mono();
    for (;;) {
        uint64_t now = mono();
        dense_credit(-(int64_t)(now - last_top));   /* every ns awake or asleep; asleep: +10 x */
        last_top = now;
        int64_t rt = realt();
        for (int i = 0; i < nq; i++) { trace_tick(&Q[i], rt); release_due(&Q[i], now); }
        flush_send();
        if (now >= next_stats) { request_stats(); next_stats = now + stats_interval_ns; }
        if (now >= next_parent) {
            if (parent_pid > 0 && getppid() != parent_pid) { fprintf(stderr, "aitb-delayline: parent gone: exiting\n"); finish(); return 3; }
            next_parent = now + 200000000ULL;
        }
        uint64_t wake = next_stats < next_parent ? next_stats : next_parent;
        for (int i = 0; i < nq; i++) {
            if (Q[i].hn && Q[i].heap[0].target < wake) wake = Q[i].heap[0].target;
            int64_t tr = trace_next_rt(&Q[i]);
            if (tr != INT64_MAX) { uint64_t m = now + (uint64_t)(tr > rt ? tr - rt : 0); if (m < wake) wake = m; }
        }
        bool release_wake = false;   /* wake is a packet's release (not stats/parent/trace) */
        for (int i = 0; i < nq; i++)
            if (Q[i].hn && Q[i].heap[0].target <= wake) release_wake = true;
        /* coalescing: at most one release round per coalesce_ns (0: off) */
        if (release_wake && coalesce_ns && wake < last_release + coalesce_ns)
            wake = last_release + coalesce_ns;
        /* spin the final stretch only while releases are sparse (gap >= SPIN_GAP x spin: at
           most 1/SPIN_GAP of the time spinning); dense releases (one every ~12 us at 1 Gbit/s
           of MTU packets) would otherwise keep a SCHED_FIFO helper spinning all the time */
        bool spin = spin_ns && (spin_dense || !release_wake ||
                                wake >= last_release + SPIN_GAP * spin_ns);
        /* dense releases: wake early by the usual lateness of a timed sleep, spin the rest */
        uint64_t lead = spin ? spin_ns : 0;
        /* a dedicated CPU: a release within spin_dense_ns is waited for spinning, not asleep --
           while it sleeps, other tasks run on that CPU, and this kernel (preempt=none) wakes
           it only when the task running there leaves the kernel: up to ms later */
        if (spin_dense && release_wake && dense_credit_ns > 0 && spin_dense_ns > lead)
            lead = spin_dense_ns;
        if (!spin && release_wake && wake_lead_max_ns && wake_late_ns > 0)
            lead = (uint64_t)wake_late_ns < wake_lead_max_ns ? (uint64_t)wake_late_ns : wake_lead_max_ns;
        if (lead && wake <= now + lead) {   /* final stretch: spin, still taking packets */
            recv_some(fd, 64);
            /* dense traffic may keep it here for good: signals at least every 100 us */
            if (now - last_signal_check > 100000ULL) {
                last_signal_check = now;
                if (take_signals(sfd)) return 0;
            }
            /* a SCHED_FIFO spinner never lets another of its priority onto its CPU: the
               lab's other helpers, pinned to the same dedicated CPU, take turns */
            if (spin_dense && rt_prio) sched_yield();
            continue;
        }
        if (wake <= now) continue;
        uint64_t until = wake - lead;
        /* timer-only sleep (absolute CLOCK_MONOTONIC, no wake-up per arrival): when no packet
           arriving meanwhile can be due before `wake` (delays of at least min_new_delay), it
           can wait in the socket and be read at the wake-up; bounded to 1 ms so signals and
           arrivals never wait longer than that; only while arrivals carry the kernel's stamp
           (none without one for 1 s), since an unstamped one is timed when it is read */
        if (release_wake && until - now < min_new_delay() && until - now <= 1000000ULL &&
            (!last_unstamped || now - last_unstamped > 1000000000ULL)) {
            struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ULL),
                                  .tv_nsec = (long)(until % 1000000000ULL)};
            uint64_t t0 = mono();
            int r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
            dense_credit(10 * (int64_t)(mono() - t0));
            if (r && r != EINTR) { errno = r; die(-1, "clock_nanosleep", NULL); }
            if (!r) note_lateness(until);
            timer_wakeups++;
            recv_some(fd, 1024);
            if (take_signals(sfd)) return 0;
            continue;
        }
        uint64_t sleep = until - now;
        struct timespec ts = {.tv_sec = (time_t)(sleep / 1000000000ULL), .tv_nsec = (long)(sleep % 1000000000ULL)};
        struct epoll_event evs[2];
        uint64_t t0 = mono();
        int n = epoll_pwait2(ep, evs, 2, &ts, NULL);
        dense_credit(10 * (int64_t)(mono() - t0));
        if (n < 0) { if (errno == EINTR) continue; die(-1, "epoll_pwait2", NULL); }
        if (n == 0 && release_wake) note_lateness(until);
        epoll_wakeups++;
        for (int e = 0; e < n; e++) {
            if (evs[e].data.u32 == 0) recv_some(fd, 256);
            else if (take_signals(sfd)) return 0;
        }
    }
}
