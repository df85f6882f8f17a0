/* The native half of bmoe-run's streaming path (runtime/native.py loads it; bmoe_native.h is the contract).
 *
 * 1. bmoe_eval_cb: llama.cpp's eval callback. The scheduler asks it about every graph node
 *    (hundreds per token); it answers natively and calls Python only for the routing nodes
 *    (ffn_moe_topk-<il>, and the routing weights when asked). Two fast paths skip Python:
 *    - skip_resident (every expert is resident): a one-token routing node is not even
 *      materialized (no graph split); its k lookups are counted as hits;
 *    - fast_hits: a materialized one-token routing node whose experts are all resident is
 *      logged (layer, expert) for the Python LRU to replay, and counted as hits.
 *    - fast_misses (a cache, with bmoe_cache attached): a one-token layer with misses is served
 *      natively too: hits move to the LRU's recent end, the least recently used experts of other
 *      layers (or of this layer, but never one it routed) leave until the misses fit the budget,
 *      their pages are given back (one process_madvise), the misses are read on the lanes
 *      straight into place and enter the LRU. Everything is logged (kind, layer, expert) in
 *      order for the Python LRU to replay; a read failure or a full log hands the node to
 *      Python (which replays the log first, then reads and raises as usual).
 * 2. bmoe_read: a batch of file reads spread over a pool of lanes (the caller is lane 0). With
 *    O_DIRECT and memory congruent to the file modulo 4096, a lane keeps up to DEPTH reads in
 *    flight through Linux native AIO (io_submit of scatter preadv: the page-aligned middle straight
 *    into place, the edge pages into per-read bounce pages), so even one lane reads at a queue
 *    depth > 1. Anything else (no AIO, not congruent, a short read) is read synchronously: the
 *    same scatter preadv, a bounce buffer, or plain pread without O_DIRECT.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/aio_abi.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bmoe_native.h"

/* ---- the contract tables (bmoe_native.h) -------------------------------------------------------- */

#define FIELD(s, f) {#f, offsetof(struct s, f), sizeof(((struct s *) 0)->f)}
#define VALUE(v) {#v, (size_t) (v), 0}

static const struct bmoe_field hook_fields[] = {
    FIELD(bmoe_hook, py), FIELD(bmoe_hook, py_ud), FIELD(bmoe_hook, name_offset), FIELD(bmoe_hook, ne_offset),
    FIELD(bmoe_hook, nb_offset), FIELD(bmoe_hook, data_offset), FIELD(bmoe_hook, mode),
    FIELD(bmoe_hook, want_weights), FIELD(bmoe_hook, skip_resident), FIELD(bmoe_hook, fast_hits),
    FIELD(bmoe_hook, n_layer), FIELD(bmoe_hook, n_expert), FIELD(bmoe_hook, resident), FIELD(bmoe_hook, layer_hits),
    FIELD(bmoe_hook, touch), FIELD(bmoe_hook, touch_cap), FIELD(bmoe_hook, n_touch), FIELD(bmoe_hook, fast_misses),
    FIELD(bmoe_hook, cache), FIELD(bmoe_hook, src_offset), FIELD(bmoe_hook, type_offset),
    FIELD(bmoe_hook, layer_misses), FIELD(bmoe_hook, ever), FIELD(bmoe_hook, layer_pagecache),
    FIELD(bmoe_hook, frame_of), FIELD(bmoe_hook, free_frames), FIELD(bmoe_hook, n_free),
};

static const struct bmoe_field job_fields[] = {
    FIELD(bmoe_job, fd), FIELD(bmoe_job, direct), FIELD(bmoe_job, off), FIELD(bmoe_job, len), FIELD(bmoe_job, dst),
    FIELD(bmoe_job, cached), FIELD(bmoe_job, nowait),
};

static const struct bmoe_field mode_values[] = {
    VALUE(BMOE_MODE_IDLE), VALUE(BMOE_MODE_CAPTURE), VALUE(BMOE_MODE_ROUTE),
};

static const struct bmoe_field log_values[] = {
    VALUE(BMOE_LOG_HIT), VALUE(BMOE_LOG_MISS), VALUE(BMOE_LOG_EVICT), VALUE(BMOE_LOG_INSERT), VALUE(BMOE_LOG_PREFETCH),
    VALUE(BMOE_LOG_PAGECACHE),
};

#define ROWS(a) (sizeof(a) / sizeof((a)[0]))

const struct bmoe_field *bmoe_struct_fields(const char *name, size_t *n, size_t *size) {
    if (strcmp(name, "bmoe_hook") == 0) {
        *n = ROWS(hook_fields);
        *size = sizeof(struct bmoe_hook);
        return hook_fields;
    }
    if (strcmp(name, "bmoe_job") == 0) {
        *n = ROWS(job_fields);
        *size = sizeof(struct bmoe_job);
        return job_fields;
    }
    return NULL;
}

const struct bmoe_field *bmoe_enum_values(const char *name, size_t *n) {
    if (strcmp(name, "bmoe_mode") == 0) {
        *n = ROWS(mode_values);
        return mode_values;
    }
    if (strcmp(name, "bmoe_log_kind") == 0) {
        *n = ROWS(log_values);
        return log_values;
    }
    return NULL;
}

/* ---- eval callback ------------------------------------------------------------------------ */

static bool miss_layer(struct bmoe_hook *h, void *t, int il);

static int digits(const char *s) {
    if (!*s) return 0;
    for (; *s; ++s)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

static int64_t tensor_ne(const struct bmoe_hook *h, const void *t, int i) {
    return ((const int64_t *) ((const char *) t + h->ne_offset))[i];
}

static size_t tensor_nb(const struct bmoe_hook *h, const void *t, int i) {
    return ((const size_t *) ((const char *) t + h->nb_offset))[i];
}

/* a materialized one-token routing node whose experts are all resident: log and count */
static bool fast_layer(struct bmoe_hook *h, void *t, int il) {
    int64_t k = tensor_ne(h, t, 0);
    if (tensor_ne(h, t, 1) != 1 || tensor_nb(h, t, 0) != 4 || il < 0 || il >= h->n_layer) return false;
    if (h->n_touch + 2 * k > h->touch_cap) return false;
    const int32_t *ids = *(int32_t *const *) ((const char *) t + h->data_offset);
    const uint8_t *res = h->resident + (size_t) il * (size_t) h->n_expert;
    for (int64_t i = 0; i < k; ++i)
        if (ids[i] < 0 || ids[i] >= h->n_expert || !res[ids[i]]) return false;
    for (int64_t i = 0; i < k; ++i) {
        h->touch[h->n_touch++] = il;
        h->touch[h->n_touch++] = ids[i];
    }
    h->layer_hits[il] += (uint64_t) k;
    return true;
}

/* frame pools: the routed ids of a one-token layer whose experts are all in (a frame each) become
 * their frame numbers, in place, before the layer's experts are multiplied */
static void frame_ids(struct bmoe_hook *h, void *ids_t, int il) {
    int64_t k = tensor_ne(h, ids_t, 0);
    int32_t *ids = *(int32_t **) ((char *) ids_t + h->data_offset);
    const int32_t *so = h->frame_of + (size_t) il * (size_t) h->n_expert;
    for (int64_t i = 0; i < k; ++i) ids[i] = so[ids[i]];
}

/* frame pools: the routing node is the gather of the routing weights (ffn_moe_weights-<il>, a
 * GET_ROWS whose src[1] is the routed ids): once it ran, only the layer's expert products still
 * read the ids, so they can be rewritten to frames */
static bool frame_route(struct bmoe_hook *h, void *t, bool ask, int il) {
    if (ask) return true;
    void *ids_t = ((void **) ((char *) t + h->src_offset))[1];
    if (ids_t && !h->want_weights && il >= 0 && il < h->n_layer) {
        if (h->fast_misses && h->cache) {
            if (miss_layer(h, ids_t, il)) {
                frame_ids(h, ids_t, il);
                return true;
            }
        } else if (h->fast_hits && fast_layer(h, ids_t, il)) {
            frame_ids(h, ids_t, il);
            return true;
        }
    }
    return h->py(t, ask, h->py_ud);
}

bool bmoe_eval_cb(void *t, bool ask, void *ud) {
    struct bmoe_hook *h = (struct bmoe_hook *) ud;
    if (h->mode == BMOE_MODE_CAPTURE) return h->py(t, ask, h->py_ud);
    if (h->mode != BMOE_MODE_ROUTE) return ask ? false : true;
    const char *name = (const char *) t + h->name_offset;
    if (strncmp(name, "ffn_moe_", 8) != 0) return ask ? false : h->py(t, ask, h->py_ud);
    if (h->frame_of && strncmp(name + 8, "weights-", 8) == 0 && digits(name + 16))
        return frame_route(h, t, ask, atoi(name + 16));
    if (strncmp(name + 8, "topk-", 5) == 0) {
        if (h->frame_of) return ask ? false : true; /* frame pools route at the weights' gather */
        if (!digits(name + 13)) return ask ? false : true;
        int il = atoi(name + 13);
        if (ask) {
            if (h->skip_resident && tensor_ne(h, t, 1) == 1 && il >= 0 && il < h->n_layer) {
                h->layer_hits[il] += (uint64_t) tensor_ne(h, t, 0);
                return false;
            }
            return true;
        }
        if (h->fast_misses && h->cache) { /* the mirror must see the all-hit layers' moves too */
            if (miss_layer(h, t, il)) return true;
        } else if (h->fast_hits && fast_layer(h, t, il)) {
            return true;
        }
        return h->py(t, ask, h->py_ud);
    }
    if (!ask) return h->py(t, ask, h->py_ud);
    if (h->want_weights && strncmp(name + 8, "weights", 7) == 0) {
        const char *dash = strrchr(name, '-');
        if (!dash) return false;
        size_t plen = (size_t) (dash - name);
        if (plen == 15 || (plen == 20 && strncmp(name + 15, "_norm", 5) == 0) ||
            (plen == 22 && strncmp(name + 15, "_scaled", 7) == 0))
            return digits(dash + 1);
    }
    return false;
}

/* ---- reads ---------------------------------------------------------------------------------- */

#define ALIGN 4096u
#define BOUNCE (1u << 20)
#define DEPTH 16

struct slot { /* one read in flight */
    struct iocb cb;
    struct iovec iov[3];
    int job;
    size_t head;   /* bytes of the first page before the range (0: the range starts on a page) */
    uint64_t mid1; /* file offset of the tail page */
    uint64_t need; /* bytes the read must return */
    char *edges;   /* 2 pages: the head page, the tail page */
};

struct lane {
    struct bmoe_pool *pool;
    pthread_t thread;
    char *bounce; /* BOUNCE bytes, 4096-aligned */
    char *edges;  /* DEPTH * 2 pages for the slots */
    aio_context_t aio;
    int has_aio;
    struct slot slots[DEPTH];
    int free_slots[DEPTH];
    int n_free;
    struct iocb *ptrs[DEPTH];
    struct io_event events[DEPTH];
    int64_t busy_ns;
};

struct bmoe_pool {
    int n_lanes;
    struct lane *lanes;
    pthread_mutex_t mu;
    pthread_cond_t start, finish;
    uint64_t gen;
    int done, quit;
    struct bmoe_job *jobs;
    int n_jobs;
    int next;  /* next job index, taken under mu */
    int err;   /* first error (negative errno) */
    int err_job;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int read_full(int fd, char *buf, size_t want, uint64_t off, size_t need) {
    size_t got = 0;
    while (got < need) {
        ssize_t n = pread(fd, buf + got, want - got, (off_t) (off + got));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EIO; /* end of file before the range ends */
        got += (size_t) n;
    }
    return 0;
}

static int read_bounce(struct lane *ln, const struct bmoe_job *j) {
    uint64_t pos = 0;
    while (pos < j->len) {
        uint64_t off = j->off + pos;
        uint64_t a = off & ~(uint64_t) (ALIGN - 1);
        size_t lead = (size_t) (off - a);
        size_t want = (size_t) (j->len - pos);
        if (want > BOUNCE - lead) want = BOUNCE - lead;
        size_t span = (lead + want + ALIGN - 1) & ~(size_t) (ALIGN - 1);
        int rc = read_full(j->fd, ln->bounce, span, a, lead + want);
        if (rc) return rc;
        memcpy(j->dst + pos, ln->bounce + lead, want);
        pos += want;
    }
    return 0;
}

/* one preadv: the page-aligned middle straight into place, the edge pages into the bounce */
static int read_scatter(struct lane *ln, const struct bmoe_job *j) {
    uint64_t end = j->off + j->len;
    uint64_t a = j->off & ~(uint64_t) (ALIGN - 1);
    size_t head = (size_t) (j->off - a);
    uint64_t mid0 = head ? a + ALIGN : a;
    uint64_t mid1 = end & ~(uint64_t) (ALIGN - 1);
    if (mid1 <= mid0) return 1;
    struct iovec iov[3];
    int n = 0;
    if (head) iov[n++] = (struct iovec){ln->bounce, ALIGN};
    iov[n++] = (struct iovec){j->dst + (mid0 - j->off), (size_t) (mid1 - mid0)};
    if (end > mid1) iov[n++] = (struct iovec){ln->bounce + ALIGN, ALIGN};
    ssize_t got;
    do {
        got = preadv(j->fd, iov, n, (off_t) a);
    } while (got < 0 && errno == EINTR);
    if (got < 0) return -errno;
    if ((uint64_t) got < end - a) return 1; /* short: redo through the bounce buffer */
    if (head) memcpy(j->dst, ln->bounce + head, ALIGN - head);
    if (end > mid1) memcpy(j->dst + (mid1 - j->off), ln->bounce + ALIGN, (size_t) (end - mid1));
    return 0;
}

/* buffered, nowait: what the page cache holds first (RWF_NOWAIT returns it without blocking and
 * stops at the first page it does not hold: EAGAIN or a short count), then the rest as usual */
static int read_buffered(struct bmoe_job *j) {
    size_t got = 0;
    if (j->nowait) {
        struct iovec iov = {j->dst, (size_t) j->len};
        ssize_t n;
        do {
            n = preadv2(j->fd, &iov, 1, (off_t) j->off, RWF_NOWAIT);
        } while (n < 0 && errno == EINTR);
        if (n > 0) got = (size_t) n;
        j->cached = got;
    }
    if (got == j->len) return 0;
    return read_full(j->fd, j->dst + got, (size_t) j->len - got, j->off + got, (size_t) j->len - got);
}

static int read_job(struct lane *ln, struct bmoe_job *j) {
    if (!j->direct) return read_buffered(j);
    if ((((uintptr_t) j->dst - j->off) & (ALIGN - 1)) == 0 && j->len >= 2 * ALIGN) {
        int rc = read_scatter(ln, j);
        if (rc <= 0) return rc;
    }
    return read_bounce(ln, j);
}

static int next_job(struct bmoe_pool *p) {
    pthread_mutex_lock(&p->mu);
    int i = p->err ? p->n_jobs : p->next++;
    pthread_mutex_unlock(&p->mu);
    return i;
}

static void fail(struct bmoe_pool *p, int rc, int i) {
    pthread_mutex_lock(&p->mu);
    if (!p->err) {
        p->err = rc;
        p->err_job = i;
    }
    pthread_mutex_unlock(&p->mu);
}

/* set up an AIO scatter read of job i in slot s; 0 when the job does not qualify */
static int prepare_aio(struct slot *s, const struct bmoe_job *j, int i) {
    if (!j->direct || (((uintptr_t) j->dst - j->off) & (ALIGN - 1)) != 0 || j->len < 2 * ALIGN) return 0;
    uint64_t end = j->off + j->len;
    uint64_t a = j->off & ~(uint64_t) (ALIGN - 1);
    s->head = (size_t) (j->off - a);
    uint64_t mid0 = s->head ? a + ALIGN : a;
    s->mid1 = end & ~(uint64_t) (ALIGN - 1);
    if (s->mid1 <= mid0) return 0;
    int n = 0;
    if (s->head) s->iov[n++] = (struct iovec){s->edges, ALIGN};
    s->iov[n++] = (struct iovec){j->dst + (mid0 - j->off), (size_t) (s->mid1 - mid0)};
    if (end > s->mid1) s->iov[n++] = (struct iovec){s->edges + ALIGN, ALIGN};
    memset(&s->cb, 0, sizeof s->cb);
    s->cb.aio_data = (uint64_t) (uintptr_t) s;
    s->cb.aio_lio_opcode = IOCB_CMD_PREADV;
    s->cb.aio_fildes = (uint32_t) j->fd;
    s->cb.aio_buf = (uint64_t) (uintptr_t) s->iov;
    s->cb.aio_nbytes = (uint64_t) n;
    s->cb.aio_offset = (int64_t) a;
    s->job = i;
    s->need = end - a;
    return 1;
}

static void complete_aio(struct lane *ln, struct slot *s, int64_t res) {
    struct bmoe_pool *p = ln->pool;
    const struct bmoe_job *j = &p->jobs[s->job];
    int rc = 0;
    if (res < 0) {
        rc = (int) res;
    } else if ((uint64_t) res < s->need) {
        rc = read_bounce(ln, j); /* short: read it again through the bounce buffer */
    } else {
        uint64_t end = j->off + j->len;
        if (s->head) memcpy(j->dst, s->edges + s->head, ALIGN - s->head);
        if (end > s->mid1) memcpy(j->dst + (s->mid1 - j->off), s->edges + ALIGN, (size_t) (end - s->mid1));
    }
    if (rc) fail(p, rc, s->job);
    ln->free_slots[ln->n_free++] = (int) (s - ln->slots);
}

static void run_lane_sync(struct lane *ln) {
    struct bmoe_pool *p = ln->pool;
    for (int i; (i = next_job(p)) < p->n_jobs;) {
        int rc = read_job(ln, &p->jobs[i]);
        if (rc) fail(p, rc, i);
    }
}

static void run_lane_aio(struct lane *ln) {
    struct bmoe_pool *p = ln->pool;
    int inflight = 0, exhausted = 0;
    for (;;) {
        int nsub = 0;
        while (!exhausted && ln->n_free > 0) {
            int i = next_job(p);
            if (i >= p->n_jobs) {
                exhausted = 1;
                break;
            }
            struct slot *s = &ln->slots[ln->free_slots[ln->n_free - 1]];
            if (!prepare_aio(s, &p->jobs[i], i)) {
                int rc = read_job(ln, &p->jobs[i]);
                if (rc) fail(p, rc, i);
                continue;
            }
            ln->n_free--;
            ln->ptrs[nsub++] = &s->cb;
        }
        if (nsub) {
            long done = syscall(SYS_io_submit, ln->aio, (long) nsub, ln->ptrs);
            if (done < 0) done = 0;
            for (long k = done; k < nsub; ++k) { /* not taken by the kernel: read them here */
                struct slot *s = (struct slot *) (uintptr_t) ln->ptrs[k]->aio_data;
                int rc = read_job(ln, &p->jobs[s->job]);
                if (rc) fail(p, rc, s->job);
                ln->free_slots[ln->n_free++] = (int) (s - ln->slots);
            }
            inflight += (int) done;
        }
        if (!inflight) {
            if (exhausted) break;
            continue;
        }
        long got = syscall(SYS_io_getevents, ln->aio, 1L, (long) inflight, ln->events, NULL);
        if (got < 0) {
            if (errno == EINTR) continue;
            got = 0;
        }
        for (long k = 0; k < got; ++k) {
            complete_aio(ln, (struct slot *) (uintptr_t) ln->events[k].data, ln->events[k].res);
            inflight--;
        }
    }
}

static void run_lane(struct lane *ln) {
    int64_t t0 = now_ns();
    if (ln->has_aio)
        run_lane_aio(ln);
    else
        run_lane_sync(ln);
    ln->busy_ns = now_ns() - t0;
}

static void *worker(void *arg) {
    struct lane *ln = (struct lane *) arg;
    struct bmoe_pool *p = ln->pool;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->start, &p->mu);
        if (p->quit) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_lane(ln);
        pthread_mutex_lock(&p->mu);
        if (++p->done == p->n_lanes - 1) pthread_cond_signal(&p->finish);
        pthread_mutex_unlock(&p->mu);
    }
}

static void free_lane(struct lane *ln) {
    if (ln->has_aio) syscall(SYS_io_destroy, ln->aio);
    ln->has_aio = 0;
    free(ln->bounce);
    free(ln->edges);
    ln->bounce = ln->edges = NULL;
}

/* free every lane's buffers (lanes >= first_thread have threads to join) and the pool */
static void bmoe_pool_free_lanes(struct bmoe_pool *p, int first_thread) {
    for (int i = first_thread; i < p->n_lanes; ++i) pthread_join(p->lanes[i].thread, NULL);
    for (int i = 0; i < p->n_lanes; ++i) free_lane(&p->lanes[i]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->finish);
    free(p->lanes);
    free(p);
}

struct bmoe_pool *bmoe_pool_new(int n_lanes) {
    if (n_lanes < 1) n_lanes = 1;
    struct bmoe_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_lanes = n_lanes;
    p->lanes = calloc((size_t) n_lanes, sizeof *p->lanes);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->finish, NULL);
    if (!p->lanes) {
        free(p);
        return NULL;
    }
    for (int i = 0; i < n_lanes; ++i) {
        struct lane *ln = &p->lanes[i];
        ln->pool = p;
        if (posix_memalign((void **) &ln->bounce, ALIGN, BOUNCE)) ln->bounce = NULL;
        if (!posix_memalign((void **) &ln->edges, ALIGN, (size_t) DEPTH * 2 * ALIGN) &&
            syscall(SYS_io_setup, (long) DEPTH, &ln->aio) == 0) {
            ln->has_aio = 1;
            for (int k = 0; k < DEPTH; ++k) {
                ln->slots[k].edges = ln->edges + (size_t) k * 2 * ALIGN;
                ln->free_slots[k] = k;
            }
            ln->n_free = DEPTH;
        }
    }
    if (!p->lanes[0].bounce) {
        p->n_lanes = n_lanes;
        bmoe_pool_free_lanes(p, n_lanes); /* no thread started yet */
        return NULL;
    }
    for (int i = 1; i < n_lanes; ++i) {
        if (!p->lanes[i].bounce || pthread_create(&p->lanes[i].thread, NULL, worker, &p->lanes[i])) {
            for (int j = i; j < n_lanes; ++j) free_lane(&p->lanes[j]);
            p->n_lanes = i; /* fewer lanes than asked */
            break;
        }
    }
    return p;
}

int bmoe_pool_lanes(const struct bmoe_pool *p) { return p->n_lanes; }

/* Read jobs[0..n) over the lanes. Returns 0, or a negative errno of the first failed job (its
 * index in *err_job); *busy_ns receives the lanes' summed busy time. */
int bmoe_read(struct bmoe_pool *p, struct bmoe_job *jobs, int n, int64_t *busy_ns, int *err_job) {
    for (int i = 0; i < n; ++i) jobs[i].cached = 0;
    int lanes = p->n_lanes;
    if (n < lanes) lanes = n < 1 ? 1 : n;
    pthread_mutex_lock(&p->mu);
    p->jobs = jobs;
    p->n_jobs = n;
    p->next = 0;
    p->err = 0;
    p->err_job = -1;
    p->done = 0;
    int helpers = lanes > 1 ? p->n_lanes - 1 : 0;
    if (helpers) {
        p->gen++;
        pthread_cond_broadcast(&p->start);
    }
    pthread_mutex_unlock(&p->mu);
    run_lane(&p->lanes[0]);
    int64_t busy = p->lanes[0].busy_ns;
    if (helpers) {
        pthread_mutex_lock(&p->mu);
        while (p->done < p->n_lanes - 1) pthread_cond_wait(&p->finish, &p->mu);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->n_lanes; ++i) busy += p->lanes[i].busy_ns;
    }
    *busy_ns = busy;
    *err_job = p->err_job;
    return p->err;
}

void bmoe_pool_free(struct bmoe_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    bmoe_pool_free_lanes(p, 1);
}

/* ---- the native LRU (fast_misses) ----------------------------------------------------------- */

#define MAX_TENSORS 4
#define SYS_PROCESS_MADVISE_NR 440
#define SYS_PIDFD_OPEN_NR 434
#define MADV_DONTNEED_ 4
#define MREMAP_DONTUNMAP_ 4

struct ctensor {
    char *addr;        /* the tensor's data */
    uint64_t file_off; /* its file offset */
    uint64_t stride;   /* bytes per expert (nb[2]) */
    char *map_base;    /* its private mapping */
    uint64_t map_size;
    uint64_t shift;    /* addr - map_base */
    uint64_t frame_stride; /* frame pools: bytes from one frame to the next (0: in place) */
    int fd;
    int direct;
    int nowait;
};

#define PRE_MAX 8    /* experts predicted per layer, at most */
#define PRE_SLOTS (PRE_MAX * MAX_TENSORS)
#define PRE_CHECKS 4 /* a layer's router is trusted once its own routing matched this often */

struct router { /* a layer's router, learned at its routing node */
    const char *w;  /* f32 rows, one per expert */
    size_t row;     /* bytes between rows */
    int64_t n_embd;
    int checks, matches; /* its own top-k reproduced from its input */
};

struct bmoe_cache {
    int n_layer, n_expert;
    int64_t budget; /* bytes; < 0: no limit */
    int64_t resident_bytes;
    int32_t head, tail; /* LRU: head = least recently used */
    int32_t *prev, *next;
    int *layer_nt;
    struct ctensor *layer_t; /* [n_layer * MAX_TENSORS] */
    int64_t *ebytes;         /* [n_layer] bytes of one expert of the layer */
    struct bmoe_pool *pool;
    int pidfd; /* this process's, for process_madvise; -1: madvise per range */
    pid_t pid; /* whose pidfd it is (a forked child must not advise its parent's pages) */
    long page;
    /* counters since the last take (Python moves them into its counters) */
    int64_t io_ns, mgmt_ns, read_bytes, xfer_bytes, reads;
    int64_t evictions, rereads, misses;
    int64_t pagecache_bytes, pagecache_misses; /* bytes / misses the page cache served (nowait reads) */
    /* scratch */
    uint8_t *disk; /* [n_expert]: a missed expert some byte of which was not in the page cache */
    struct bmoe_job *jobs;
    int jobs_cap;
    int32_t *victims;
    struct iovec *iov;
    int iov_cap;
    int64_t moved_pages; /* since the last take: pages moved from victims into missed slices */
    int no_move;         /* mremap refused MREMAP_DONTUNMAP (kernel < 5.7): give back, fault in */
    /* early prefetch (pre_*): at a layer's routing node, the next streamed layer's router applied
     * to this layer's router input predicts its experts; the predicted ones not resident are
     * read asynchronously (own AIO context) and enter the LRU when the next routing settles them */
    struct bmoe_hook *hook;
    int pre_m;              /* experts predicted per layer (0: off) */
    int *next_layer;        /* [n_layer]: the next streamed layer, or -1 */
    struct router *routers; /* [n_layer] */
    float *logits;          /* [n_expert] scratch */
    aio_context_t pre_aio;
    int pre_has_aio;
    char *pre_edges;        /* PRE_SLOTS * 2 pages */
    struct slot pre_slots[PRE_SLOTS];
    struct bmoe_job pre_jobs[PRE_SLOTS];
    int pre_job_expert[PRE_SLOTS]; /* which pre_ids entry each job reads */
    int pre_inflight;       /* reads submitted, not yet reaped */
    int32_t pre_ids[PRE_MAX];
    int pre_bad[PRE_MAX];
    int pre_n;              /* experts being read */
};


static void lru_unlink(struct bmoe_cache *c, int32_t id) {
    if (c->prev[id] < 0 && c->next[id] < 0 && c->head != id) return; /* not in the list */
    int32_t p = c->prev[id], n = c->next[id];
    if (p >= 0) c->next[p] = n; else c->head = n;
    if (n >= 0) c->prev[n] = p; else c->tail = p;
    c->prev[id] = c->next[id] = -1;
}

static void lru_push(struct bmoe_cache *c, int32_t id) {
    c->prev[id] = c->tail;
    c->next[id] = -1;
    if (c->tail >= 0) c->next[c->tail] = id; else c->head = id;
    c->tail = id;
}

static void pre_settle(struct bmoe_cache *c);
static void count_tiers(struct bmoe_hook *h, struct bmoe_cache *c, int il, const int32_t *miss, int nm, int nj);

struct bmoe_cache *bmoe_cache_new(int n_layer, int n_expert, void *pool) {
    if (n_layer <= 0 || n_expert <= 0) return NULL;
    struct bmoe_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    size_t n = (size_t) n_layer * (size_t) n_expert;
    c->n_layer = n_layer;
    c->n_expert = n_expert;
    c->budget = -1;
    c->head = c->tail = -1;
    c->prev = malloc(n * sizeof *c->prev);
    c->next = malloc(n * sizeof *c->next);
    c->victims = malloc(n * sizeof *c->victims);
    c->disk = calloc((size_t) n_expert, 1);
    c->layer_nt = calloc((size_t) n_layer, sizeof *c->layer_nt);
    c->layer_t = calloc((size_t) n_layer * MAX_TENSORS, sizeof *c->layer_t);
    c->ebytes = calloc((size_t) n_layer, sizeof *c->ebytes);
    c->pool = (struct bmoe_pool *) pool;
    c->page = sysconf(_SC_PAGESIZE);
    c->pid = getpid();
    c->pidfd = (int) syscall(SYS_PIDFD_OPEN_NR, (long) c->pid, 0L);
    if (!c->prev || !c->next || !c->victims || !c->disk || !c->layer_nt || !c->layer_t || !c->ebytes || c->page <= 0) {
        free(c->prev); free(c->next); free(c->victims); free(c->disk); free(c->layer_nt); free(c->layer_t);
        free(c->ebytes);
        if (c->pidfd >= 0) close(c->pidfd);
        free(c);
        return NULL;
    }
    for (size_t i = 0; i < n; ++i) c->prev[i] = c->next[i] = -1;
    return c;
}

/* one expert tensor of layer il; 0, or -1 (too many tensors, bad layer) */
int bmoe_cache_tensor(struct bmoe_cache *c, int il, void *addr, uint64_t file_off, uint64_t stride, void *map_base,
                      uint64_t map_size, int fd, int direct, int nowait, uint64_t frame_stride) {
    if (il < 0 || il >= c->n_layer || c->layer_nt[il] >= MAX_TENSORS) return -1;
    struct ctensor *x = &c->layer_t[il * MAX_TENSORS + c->layer_nt[il]++];
    x->addr = (char *) addr;
    x->file_off = file_off;
    x->stride = stride;
    x->map_base = (char *) map_base;
    x->map_size = map_size;
    x->shift = (uint64_t) ((char *) addr - (char *) map_base);
    x->fd = fd;
    x->direct = direct;
    x->nowait = nowait;
    x->frame_stride = frame_stride;
    c->ebytes[il] += (int64_t) stride;
    return 0;
}

/* the LRU order (ids il*n_expert+e, least recent first), the budget (< 0: none), resident bytes */
void bmoe_cache_sync(struct bmoe_cache *c, const int32_t *ids, int n, int64_t budget, int64_t resident_bytes) {
    pre_settle(c);
    size_t total = (size_t) c->n_layer * (size_t) c->n_expert;
    for (size_t i = 0; i < total; ++i) c->prev[i] = c->next[i] = -1;
    c->head = c->tail = -1;
    for (int i = 0; i < n; ++i)
        if (ids[i] >= 0 && (size_t) ids[i] < total) lru_push(c, ids[i]);
    c->budget = budget;
    c->resident_bytes = resident_bytes;
}

/* counters since the last call: io_ns, mgmt_ns, read_bytes, xfer_bytes, reads, moved_pages,
 * evictions, rereads, misses served; then zeroed. out[9]: the resident bytes now. out[10], out[11]
 * (since the last call, zeroed): the bytes and the misses the page cache served. */
void bmoe_cache_take(struct bmoe_cache *c, int64_t *out) {
    out[0] = c->io_ns;
    out[1] = c->mgmt_ns;
    out[2] = c->read_bytes;
    out[3] = c->xfer_bytes;
    out[4] = c->reads;
    out[5] = c->moved_pages;
    out[6] = c->evictions;
    out[7] = c->rereads;
    out[8] = c->misses;
    out[9] = c->resident_bytes;
    out[10] = c->pagecache_bytes;
    out[11] = c->pagecache_misses;
    c->pagecache_bytes = c->pagecache_misses = 0;
    c->io_ns = c->mgmt_ns = c->read_bytes = c->xfer_bytes = c->reads = c->moved_pages = 0;
    c->evictions = c->rereads = c->misses = 0;
}

/* the LRU order (ids il*n_expert+e, least recent first) into out[0..cap); returns how many */
int bmoe_cache_order(const struct bmoe_cache *c, int32_t *out, int cap) {
    int n = 0;
    for (int32_t id = c->head; id >= 0 && n < cap; id = c->next[id]) out[n++] = id;
    return n;
}

void bmoe_cache_free(struct bmoe_cache *c) {
    if (!c) return;
    pre_settle(c);
    if (c->pre_has_aio) syscall(SYS_io_destroy, c->pre_aio);
    free(c->next_layer); free(c->routers); free(c->logits); free(c->pre_edges);
    free(c->prev); free(c->next); free(c->victims); free(c->disk); free(c->layer_nt); free(c->layer_t);
    free(c->ebytes); free(c->jobs); free(c->iov);
    if (c->pidfd >= 0) close(c->pidfd);
    free(c);
}

/* Early prefetch: m experts predicted per layer (0: off; at most PRE_MAX), next_layer[n_layer]
 * the next streamed layer of each layer (-1: none). 0, or -1 (no memory, no native AIO: off). */
int bmoe_cache_prefetch(struct bmoe_cache *c, int m, const int32_t *next_layer) {
    pre_settle(c);
    c->pre_m = 0;
    if (m <= 0) return 0;
    if (!c->routers) {
        c->next_layer = malloc((size_t) c->n_layer * sizeof *c->next_layer);
        c->routers = calloc((size_t) c->n_layer, sizeof *c->routers);
        c->logits = malloc((size_t) c->n_expert * sizeof *c->logits);
        if (posix_memalign((void **) &c->pre_edges, ALIGN, (size_t) PRE_SLOTS * 2 * ALIGN)) c->pre_edges = NULL;
        if (!c->next_layer || !c->routers || !c->logits || !c->pre_edges) return -1;
        for (int i = 0; i < PRE_SLOTS; ++i) c->pre_slots[i].edges = c->pre_edges + (size_t) i * 2 * ALIGN;
    }
    if (!c->pre_has_aio) {
        if (syscall(SYS_io_setup, (long) PRE_SLOTS, &c->pre_aio) != 0) return -1;
        c->pre_has_aio = 1;
    }
    for (int i = 0; i < c->n_layer; ++i) c->next_layer[i] = next_layer[i];
    c->pre_m = m < PRE_MAX ? m : PRE_MAX;
    return 0;
}

/* wait for the early prefetch's reads and log the experts that arrived (before Python replays) */
void bmoe_cache_settle(struct bmoe_cache *c) { pre_settle(c); }

static int grow_iov(struct bmoe_cache *c, int need) {
    if (need <= c->iov_cap) return 0;
    int cap = need < 64 ? 64 : need * 2;
    struct iovec *v = realloc(c->iov, (size_t) cap * sizeof *v);
    if (!v) return -1;
    c->iov = v;
    c->iov_cap = cap;
    return 0;
}

static int grow_jobs(struct bmoe_cache *c, int need) {
    if (need <= c->jobs_cap) return 0;
    int cap = need < 64 ? 64 : need * 2;
    struct bmoe_job *j = realloc(c->jobs, (size_t) cap * sizeof *j);
    if (!j) return -1;
    c->jobs = j;
    c->jobs_cap = cap;
    return 0;
}

/* give back the pages of every victim (after all of them left: a page two victims share goes) */
/* The first nv of c->victims leave the LRU: unlinked, no longer resident, their bytes off the
   cache's total, each logged (BMOE_LOG_EVICT) for the Python LRU's replay. Their pages are given back
   (or moved) by release_victims_into. */
static void evict_victims(struct bmoe_hook *h, struct bmoe_cache *c, uint8_t *res, int nv, int ne) {
    for (int v = 0; v < nv; ++v) {
        int32_t id = c->victims[v];
        lru_unlink(c, id);
        res[id] = 0;
        c->evictions++;
        c->resident_bytes -= c->ebytes[id / ne];
        h->touch[h->n_touch++] = (id / ne) | BMOE_LOG_EVICT << 16;
        h->touch[h->n_touch++] = id % ne;
    }
}

struct page_run { /* whole pages a victim gives up */
    char *a;
    uint64_t n;
};

/* Give back the pages of every victim (after all of them left: a page two victims share goes).
 * With misses to read (layer dl, experts dids[0..nd)), the whole pages inside each victim's slice
 * move (mremap) into the whole pages inside a missed slice instead of being given back: the read
 * then lands on committed pages, with no page fault and no zeroing. What cannot move is given
 * back. */
static void release_victims_into(struct bmoe_hook *h, struct bmoe_cache *c, int nv, int dl, const int32_t *dids,
                                  int nd) {
    if (h->frame_of) { /* frame pools: the victims' frames are free again, their bytes are read over */
        for (int v = 0; v < nv; ++v) {
            int32_t id = c->victims[v];
            if (h->frame_of[id] >= 0) {
                h->free_frames[(*h->n_free)++] = h->frame_of[id];
                h->frame_of[id] = -1;
            }
        }
        return;
    }
    int nr = 0;
    if (grow_iov(c, nv * MAX_TENSORS * 3 + 1)) {
        return; /* no memory for the list: the pages stay (RSS above budget, output unchanged) */
    }
    uint64_t page = (uint64_t) c->page;
    struct page_run runs[64 * MAX_TENSORS];
    int nrun = 0;
    const int moving = !c->no_move && nd > 0;
    for (int v = 0; v < nv; ++v) {
        int il = c->victims[v] / c->n_expert, e = c->victims[v] % c->n_expert;
        const uint8_t *res = h->resident + (size_t) il * (size_t) c->n_expert;
        int prev_free = e > 0 && !res[e - 1];
        int next_free = e + 1 >= c->n_expert || !res[e + 1];
        for (int k = 0; k < c->layer_nt[il]; ++k) {
            const struct ctensor *x = &c->layer_t[il * MAX_TENSORS + k];
            uint64_t lo = (uint64_t) e * x->stride + x->shift, hi = lo + x->stride;
            uint64_t a = (lo + page - 1) / page * page, b = hi / page * page;
            uint64_t a0 = a, b0 = b;
            if (a != lo && (prev_free || e == 0)) a -= page;
            if (b != hi && (next_free || e == c->n_expert - 1)) b += page;
            if (b > x->map_size) b = x->map_size;
            if (moving && b0 > a0 && nrun < 64 * MAX_TENSORS) {
                runs[nrun++] = (struct page_run){x->map_base + a0, b0 - a0};
                if (a0 > a) c->iov[nr++] = (struct iovec){x->map_base + a, (size_t) (a0 - a)};
                if (b > b0) c->iov[nr++] = (struct iovec){x->map_base + b0, (size_t) (b - b0)};
            } else if (b > a) {
                c->iov[nr++] = (struct iovec){x->map_base + a, (size_t) (b - a)};
            }
        }
    }
    if (nrun) {
        for (int q = 0; q < c->layer_nt[dl]; ++q) {
            const struct ctensor *x = &c->layer_t[dl * MAX_TENSORS + q];
            for (int i = 0; i < nd; ++i) {
                uint64_t lo = (uint64_t) dids[i] * x->stride + x->shift, hi = lo + x->stride;
                uint64_t a = (lo + page - 1) / page * page, b = hi / page * page;
                if (b <= a) continue;
                int pick = -1;
                for (int r = 0; r < nrun; ++r) { /* the same size first, else the first with pages */
                    if (runs[r].n == b - a) {
                        pick = r;
                        break;
                    }
                    if (pick < 0 && runs[r].n) pick = r;
                }
                if (pick < 0) break;
                uint64_t n = runs[pick].n < b - a ? runs[pick].n : b - a;
                if (mremap(runs[pick].a, n, n, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP_,
                           x->map_base + a) == MAP_FAILED) {
                    /* EINVAL: no MREMAP_DONTUNMAP here; else (a run over two mappings, the map
                     * count at its limit) this run is given back and the read faults its pages in */
                    if (errno == EINVAL) c->no_move = 1;
                    c->iov[nr++] = (struct iovec){runs[pick].a, (size_t) runs[pick].n};
                    runs[pick].n = 0;
                    continue;
                }
                c->moved_pages += (int64_t) (n / page);
                runs[pick].a += n;
                runs[pick].n -= n;
            }
        }
        for (int r = 0; r < nrun; ++r)
            if (runs[r].n) c->iov[nr++] = (struct iovec){runs[r].a, (size_t) runs[r].n};
    }
    if (!nr) return;
    if (c->pidfd >= 0 && getpid() != c->pid) {
        close(c->pidfd);
        c->pidfd = -1;
    }
    if (c->pidfd >= 0 && nr > 1) {
        size_t want = 0;
        for (int i = 0; i < nr; ++i) want += c->iov[i].iov_len;
        long got = syscall(SYS_PROCESS_MADVISE_NR, (long) c->pidfd, c->iov, (long) nr, (long) MADV_DONTNEED_, 0L);
        if (got == (long) want) return;
        if (got < 0) {
            close(c->pidfd); /* refused (an old kernel): madvise per range from now on */
            c->pidfd = -1;
        }
    }
    for (int i = 0; i < nr; ++i) madvise(c->iov[i].iov_base, c->iov[i].iov_len, MADV_DONTNEED_);
}

static void release_victims(struct bmoe_hook *h, struct bmoe_cache *c, int nv) {
    release_victims_into(h, c, nv, 0, NULL, 0);
}

static int cmp_job_len(const void *a, const void *b) {
    uint64_t x = ((const struct bmoe_job *) a)->len, y = ((const struct bmoe_job *) b)->len;
    return x < y ? 1 : (x > y ? -1 : 0);
}

/* Python looks this layer up again, reads and raises: take back what this layer's routing logged
 * and counted (the evictions stand; frames taken by its misses stay theirs); the LRU order is
 * synced again before the next decode */
static void untake_layer(struct bmoe_hook *h, int log0, int64_t k, int nm, int il) {
    int nlog = h->n_touch - log0 - (int) (2 * k);
    memmove(h->touch + log0, h->touch + log0 + 2 * k, (size_t) nlog * sizeof *h->touch);
    h->n_touch = log0 + nlog;
    h->layer_hits[il] -= (uint64_t) (k - nm);
}

static bool serve_layer(struct bmoe_hook *h, void *t, int il) {
    struct bmoe_cache *c = h->cache;
    int64_t t0 = now_ns();
    int64_t k = tensor_ne(h, t, 0);
    if (tensor_ne(h, t, 1) != 1 || tensor_nb(h, t, 0) != 4 || il < 0 || il >= h->n_layer || il >= c->n_layer ||
        k <= 0 || k > 64 || !c->layer_nt[il])
        return false;
    const int32_t *ids = *(int32_t *const *) ((const char *) t + h->data_offset);
    const int ne = c->n_expert;
    uint8_t *res = (uint8_t *) h->resident;
    const uint8_t *lres = res + (size_t) il * (size_t) ne;
    int32_t miss[64];
    int nm = 0;
    for (int64_t i = 0; i < k; ++i) {
        if (ids[i] < 0 || ids[i] >= ne) return false; /* Python raises the message */
        for (int64_t j = 0; j < i; ++j)
            if (ids[j] == ids[i]) return false; /* not a plain top-k row */
        if (!lres[ids[i]]) miss[nm++] = ids[i];
    }
    /* the victims, least recent first, never an expert this layer routed */
    int64_t need = (int64_t) nm * c->ebytes[il];
    int nv = 0;
    if (nm && c->budget >= 0) {
        int64_t resident = c->resident_bytes;
        for (int32_t id = c->head; id >= 0 && resident + need > c->budget; id = c->next[id]) {
            int vl = id / ne, ve = id % ne;
            if (vl == il) {
                int routed = 0;
                for (int64_t i = 0; i < k; ++i) routed |= ids[i] == ve;
                if (routed) continue;
            }
            c->victims[nv++] = id;
            resident -= c->ebytes[vl];
        }
    }
    if (h->n_touch + 2 * (k + nv + 2 * nm) > h->touch_cap || grow_jobs(c, nm * c->layer_nt[il])) return false;
    /* routing order: hits to the recent end, misses noted */
    const int log0 = h->n_touch;
    for (int64_t i = 0; i < k; ++i) {
        int32_t id = il * ne + ids[i];
        int hit = lres[ids[i]] != 0;
        h->touch[h->n_touch++] = il | (hit ? BMOE_LOG_HIT : BMOE_LOG_MISS) << 16;
        h->touch[h->n_touch++] = ids[i];
        if (hit) {
            lru_unlink(c, id);
            lru_push(c, id);
        }
    }
    h->layer_hits[il] += (uint64_t) (k - nm);
    if (!nm) {
        c->mgmt_ns += now_ns() - t0;
        return true;
    }
    evict_victims(h, c, res, nv, ne);
    release_victims_into(h, c, nv, il, miss, nm);
    /* the reads: per tensor, runs of adjacent missing experts, largest first */
    int32_t sorted[64];
    memcpy(sorted, miss, (size_t) nm * sizeof *miss);
    for (int i = 1; i < nm; ++i)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; --j) {
            int32_t x = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = x;
        }
    int nt = c->layer_nt[il], nj = 0;
    if (h->frame_of) { /* each missed expert takes a free frame (the evictions above freed enough) */
        for (int i = 0; i < nm; ++i) { /* in routing order, as the Python path takes them */
            int32_t id = il * ne + miss[i];
            if (h->frame_of[id] < 0) {
                if (*h->n_free <= 0) { /* the LRU holds more than the frames: Python raises it */
                    untake_layer(h, log0, k, nm, il);
                    return false;
                }
                h->frame_of[id] = h->free_frames[--*h->n_free];
            }
        }
    }
    for (int q = 0; q < nt; ++q) {
        const struct ctensor *x = &c->layer_t[il * MAX_TENSORS + q];
        if (x->frame_stride) {
            for (int i = 0; i < nm; ++i) {
                uint64_t a = (uint64_t) sorted[i] * x->stride;
                struct bmoe_job *jb = &c->jobs[nj++];
                jb->fd = x->fd;
                jb->direct = x->direct;
                jb->nowait = x->nowait;
                jb->off = x->file_off + a;
                jb->len = x->stride;
                jb->dst = x->addr + (uint64_t) h->frame_of[il * ne + sorted[i]] * x->frame_stride;
                uint64_t x0 = jb->off / ALIGN * ALIGN, x1 = (jb->off + jb->len + ALIGN - 1) / ALIGN * ALIGN;
                c->xfer_bytes += (int64_t) (x1 - x0);
            }
            continue;
        }
        for (int i = 0; i < nm;) {
            int j = i;
            while (j + 1 < nm && sorted[j + 1] == sorted[j] + 1) ++j;
            uint64_t a = (uint64_t) sorted[i] * x->stride, b = (uint64_t) (sorted[j] + 1) * x->stride;
            struct bmoe_job *jb = &c->jobs[nj++];
            jb->fd = x->fd;
            jb->direct = x->direct;
            jb->nowait = x->nowait;
            jb->off = x->file_off + a;
            jb->len = b - a;
            jb->dst = x->addr + a;
            uint64_t x0 = jb->off / ALIGN * ALIGN, x1 = (jb->off + jb->len + ALIGN - 1) / ALIGN * ALIGN;
            c->xfer_bytes += (int64_t) (x1 - x0);
            i = j + 1;
        }
    }
    qsort(c->jobs, (size_t) nj, sizeof *c->jobs, cmp_job_len);
    int64_t t1 = now_ns();
    c->mgmt_ns += t1 - t0;
    int64_t busy = 0;
    int err_job = -1;
    int rc = bmoe_read(c->pool, c->jobs, nj, &busy, &err_job);
    int64_t t2 = now_ns();
    c->io_ns += t2 - t1;
    c->reads += nj;
    if (rc) {
        untake_layer(h, log0, k, nm, il);
        return false;
    }
    c->read_bytes += need;
    c->misses += nm;
    h->layer_misses[il] += (uint64_t) nm;
    count_tiers(h, c, il, miss, nm, nj);
    for (int i = 0; i < nm; ++i) {
        int32_t id = il * ne + miss[i];
        c->rereads += h->ever[id];
        h->ever[id] = 1;
        res[id] = 1;
        lru_push(c, id);
        c->resident_bytes += c->ebytes[il];
        h->touch[h->n_touch++] = il | BMOE_LOG_INSERT << 16;
        h->touch[h->n_touch++] = miss[i];
    }
    c->mgmt_ns += now_ns() - t2;
    return true;
}

/* the tiers of a layer's nm misses after their nj reads: a missed expert came from the page cache
 * when every byte of its slices did (each read's cached prefix covers the slice), else from disk */
static void count_tiers(struct bmoe_hook *h, struct bmoe_cache *c, int il, const int32_t *miss, int nm, int nj) {
    const struct ctensor *t0 = &c->layer_t[il * MAX_TENSORS];
    if (!t0->nowait) return; /* O_DIRECT: every miss is a disk read */
    for (int i = 0; i < nm; ++i) c->disk[miss[i]] = 0;
    for (int q = 0; q < nj; ++q) {
        const struct bmoe_job *jb = &c->jobs[q];
        c->pagecache_bytes += (int64_t) jb->cached;
        for (int s = 0; s < c->layer_nt[il]; ++s) {
            const struct ctensor *x = &t0[s];
            if (x->fd != jb->fd || jb->off < x->file_off || jb->off >= x->file_off + x->stride * (uint64_t) c->n_expert)
                continue;
            uint64_t e0 = (jb->off - x->file_off) / x->stride, ne = jb->len / x->stride;
            for (uint64_t e = 0; e < ne; ++e)
                if (jb->cached < (e + 1) * x->stride) c->disk[e0 + e] = 1;
            break;
        }
    }
    int pc = 0;
    for (int i = 0; i < nm; ++i) {
        if (c->disk[miss[i]]) continue;
        ++pc;
        h->touch[h->n_touch++] = il | BMOE_LOG_PAGECACHE << 16;
        h->touch[h->n_touch++] = miss[i];
    }
    c->pagecache_misses += pc;
    if (h->layer_pagecache) h->layer_pagecache[il] += (uint64_t) pc;
}

/* ---- early prefetch -------------------------------------------------------------------------- */

/* the router's logits node above a routing node (ffn_moe_topk is a view of an argsort of the
 * probabilities of the logits): depth-first through the sources, a few levels up */
static const char *find_logits(const struct bmoe_hook *h, const char *t, int depth) {
    if (!t) return NULL;
    if (strncmp(t + h->name_offset, "ffn_moe_logits", 14) == 0) return t;
    if (depth == 0) return NULL;
    const char *const *src = (const char *const *) (t + h->src_offset);
    for (int i = 0; i < 10; ++i) {
        const char *r = find_logits(h, src[i], depth - 1);
        if (r) return r;
    }
    return NULL;
}

static int32_t tensor_type(const struct bmoe_hook *h, const char *t) { return *(const int32_t *) (t + h->type_offset); }

static const char *tensor_data(const struct bmoe_hook *h, const char *t) { return *(const char *const *) (t + h->data_offset); }

/* logits = W x over the experts (f32; sixteen partial sums per row, in 4-float vectors) */
typedef float v4f __attribute__((vector_size(16)));

static v4f load4(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void router_logits(const struct router *r, const float *x, float *out, int n_expert) {
    int64_t n = r->n_embd;
    for (int e = 0; e < n_expert; ++e) {
        const float *w = (const float *) (r->w + (size_t) e * r->row);
        v4f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            a0 += load4(w + i) * load4(x + i);
            a1 += load4(w + i + 4) * load4(x + i + 4);
            a2 += load4(w + i + 8) * load4(x + i + 8);
            a3 += load4(w + i + 12) * load4(x + i + 12);
        }
        v4f a = (a0 + a1) + (a2 + a3);
        float s = (a[0] + a[1]) + (a[2] + a[3]);
        for (; i < n; ++i) s += w[i] * x[i];
        out[e] = s;
    }
}

/* the m largest logits' experts, largest first (ties: the lower id) */
static int top_m(const float *v, int n, int m, int32_t *out) {
    int k = 0;
    for (int e = 0; e < n; ++e) {
        if (k == m && v[e] <= v[out[k - 1]]) continue;
        int j = k < m ? k++ : m - 1;
        while (j > 0 && v[out[j - 1]] < v[e]) {
            out[j] = out[j - 1];
            --j;
        }
        out[j] = e;
    }
    return k;
}

/* the router input of layer il at its routing node t (f32, one token), learning the layer's router
 * weights; NULL when the graph does not have the expected shape here */
static const float *router_input(struct bmoe_hook *h, struct bmoe_cache *c, const char *t, int il) {
    const char *lg = find_logits(h, t, 5);
    if (!lg) return NULL;
    const char *const *src = (const char *const *) (lg + h->src_offset);
    const char *w = src[0], *x = src[1];
    if (!w || !x || tensor_type(h, w) != 0 || tensor_type(h, x) != 0) return NULL; /* f32 only */
    if (tensor_ne(h, w, 0) != tensor_ne(h, x, 0) || tensor_ne(h, w, 1) != c->n_expert || tensor_ne(h, x, 1) != 1 ||
        tensor_nb(h, w, 0) != 4 || tensor_nb(h, x, 0) != 4)
        return NULL;
    struct router *r = &c->routers[il];
    r->w = tensor_data(h, w);
    r->row = tensor_nb(h, w, 1);
    r->n_embd = tensor_ne(h, w, 0);
    return (const float *) tensor_data(h, x);
}

/* the reads in flight land: the experts that arrived enter the LRU's recent end (logged), the
 * others are given back */
static void pre_settle(struct bmoe_cache *c) {
    if (!c->pre_n) return;
    struct bmoe_hook *h = c->hook;
    int64_t t0 = now_ns();
    struct io_event ev[PRE_SLOTS];
    while (c->pre_inflight > 0) {
        long got = syscall(SYS_io_getevents, c->pre_aio, 1L, (long) c->pre_inflight, ev, NULL);
        if (got < 0) {
            if (errno == EINTR) continue;
            for (int i = 0; i < c->pre_n; ++i) c->pre_bad[i] = 1;
            break;
        }
        for (long k = 0; k < got; ++k) {
            struct slot *sl = (struct slot *) (uintptr_t) ev[k].data;
            const struct bmoe_job *j = &c->pre_jobs[sl->job];
            if (ev[k].res < 0 || (uint64_t) ev[k].res < sl->need) {
                c->pre_bad[c->pre_job_expert[sl->job]] = 1;
            } else {
                uint64_t end = j->off + j->len;
                if (sl->head) memcpy(j->dst, sl->edges + sl->head, ALIGN - sl->head);
                if (end > sl->mid1) memcpy(j->dst + (sl->mid1 - j->off), sl->edges + ALIGN, (size_t) (end - sl->mid1));
            }
        }
        c->pre_inflight -= (int) got;
    }
    c->pre_inflight = 0;
    int64_t t1 = now_ns();
    c->io_ns += t1 - t0;
    uint8_t *res = (uint8_t *) h->resident;
    int nbad = 0;
    for (int i = 0; i < c->pre_n; ++i) {
        int32_t id = c->pre_ids[i];
        int il = id / c->n_expert;
        if (c->pre_bad[i] || h->n_touch + 2 > h->touch_cap) {
            c->resident_bytes -= c->ebytes[il];
            c->victims[nbad++] = id; /* not resident: its pages go back */
            continue;
        }
        res[id] = 1;
        h->ever[id] = 1;
        lru_push(c, id);
        c->read_bytes += c->ebytes[il];
        h->touch[h->n_touch++] = il | BMOE_LOG_PREFETCH << 16;
        h->touch[h->n_touch++] = id % c->n_expert;
    }
    if (nbad) release_victims(h, c, nbad);
    c->pre_n = 0;
    c->mgmt_ns += now_ns() - t1;
}

/* after layer il routed ids[0..k) (all resident now): predict the next streamed layer's experts
 * from this layer's router input x and start reading the predicted ones not resident */
static void pre_issue(struct bmoe_hook *h, struct bmoe_cache *c, const float *x, int il, const int32_t *ids, int64_t k) {
    int nl = c->next_layer[il];
    if (nl < 0 || nl >= c->n_layer || !c->layer_nt[nl]) return;
    const struct router *r = &c->routers[nl];
    if (!r->w || r->n_embd != c->routers[il].n_embd || r->checks < PRE_CHECKS || r->matches < r->checks - 1) return;
    int64_t t0 = now_ns();
    const int ne = c->n_expert;
    int32_t pred[PRE_MAX];
    router_logits(r, x, c->logits, ne);
    int np = top_m(c->logits, ne, c->pre_m, pred);
    uint8_t *res = (uint8_t *) h->resident;
    const uint8_t *nres = res + (size_t) nl * (size_t) ne;
    int32_t want[PRE_MAX];
    int nw = 0;
    for (int i = 0; i < np; ++i)
        if (!nres[pred[i]]) want[nw++] = pred[i];
    const int nt = c->layer_nt[nl];
    for (int q = 0; q < nt; ++q) { /* O_DIRECT reads landing in place only */
        const struct ctensor *xt = &c->layer_t[nl * MAX_TENSORS + q];
        if (!xt->direct || (((uintptr_t) xt->addr - xt->file_off) & (ALIGN - 1)) != 0 || xt->stride < 2 * ALIGN) nw = 0;
    }
    /* room: least recent first, never what this layer routed nor what is predicted next */
    int nv = 0;
    while (nw && c->budget >= 0) {
        int64_t resident = c->resident_bytes, need = (int64_t) nw * c->ebytes[nl];
        nv = 0;
        for (int32_t id = c->head; id >= 0 && resident + need > c->budget; id = c->next[id]) {
            int vl = id / ne, ve = id % ne, keep = 0;
            if (vl == il)
                for (int64_t i = 0; i < k; ++i) keep |= ids[i] == ve;
            if (vl == nl)
                for (int i = 0; i < np; ++i) keep |= pred[i] == ve;
            if (keep) continue;
            c->victims[nv++] = id;
            resident -= c->ebytes[vl];
        }
        if (resident + need <= c->budget) break;
        --nw; /* fewer: the least likely go first */
        nv = 0;
    }
    if (!nw || h->n_touch + 2 * (nv + nw) > h->touch_cap) {
        c->mgmt_ns += now_ns() - t0;
        return;
    }
    evict_victims(h, c, res, nv, ne);
    release_victims_into(h, c, nv, nl, want, nw);
    int nj = 0;
    for (int i = 0; i < nw; ++i) {
        c->pre_ids[i] = nl * ne + want[i];
        c->pre_bad[i] = 0;
        c->resident_bytes += c->ebytes[nl]; /* counted from now: the budget holds them */
        for (int q = 0; q < nt; ++q) {
            const struct ctensor *xt = &c->layer_t[nl * MAX_TENSORS + q];
            struct bmoe_job *jb = &c->pre_jobs[nj];
            uint64_t a = (uint64_t) want[i] * xt->stride;
            jb->fd = xt->fd;
            jb->direct = 1;
            jb->nowait = 0;
            jb->cached = 0;
            jb->off = xt->file_off + a;
            jb->len = xt->stride;
            jb->dst = xt->addr + a;
            c->pre_job_expert[nj] = i;
            struct slot *sl = &c->pre_slots[nj];
            if (!prepare_aio(sl, jb, nj) ) {
                c->pre_bad[i] = 1;
                continue;
            }
            struct iocb *cb = &sl->cb;
            if (syscall(SYS_io_submit, c->pre_aio, 1L, &cb) != 1) {
                c->pre_bad[i] = 1;
                continue;
            }
            uint64_t x0 = jb->off / ALIGN * ALIGN, x1 = (jb->off + jb->len + ALIGN - 1) / ALIGN * ALIGN;
            c->xfer_bytes += (int64_t) (x1 - x0);
            c->reads += 1;
            ++c->pre_inflight;
            ++nj;
        }
    }
    c->pre_n = nw;
    c->mgmt_ns += now_ns() - t0;
}

/* own-layer check: the layer's router on its input reproduces the routed experts */
static void pre_check(struct bmoe_cache *c, const float *x, int il, const int32_t *ids, int64_t k) {
    struct router *r = &c->routers[il];
    if (r->checks >= PRE_CHECKS || k > PRE_MAX) return;
    int32_t top[PRE_MAX];
    router_logits(r, x, c->logits, c->n_expert);
    int n = top_m(c->logits, c->n_expert, (int) k, top), same = n == k;
    for (int i = 0; i < n && same; ++i) {
        int found = 0;
        for (int64_t j = 0; j < k; ++j) found |= ids[j] == top[i];
        same = found;
    }
    r->checks++;
    r->matches += same;
}

static bool miss_layer(struct bmoe_hook *h, void *t, int il) {
    struct bmoe_cache *c = h->cache;
    c->hook = h;
    pre_settle(c);
    if (!serve_layer(h, t, il)) return false;
    if (c->pre_m > 0 && il >= 0 && il < c->n_layer) {
        const float *x = router_input(h, c, (const char *) t, il);
        if (x) {
            const int32_t *ids = *(int32_t *const *) ((const char *) t + h->data_offset);
            int64_t k = tensor_ne(h, t, 0);
            pre_check(c, x, il, ids, k);
            pre_issue(h, c, x, il, ids, k);
        }
    }
    return true;
}
