/* The contract between the native half of bmoe-run's streaming path (bmoe_native.c) and its
 * Python half (native.py, which loads the library through ctypes).
 *
 * Shared memory: struct bmoe_hook (the eval callback's state, written by both sides) and
 * struct bmoe_job (one read). Python declares both as ctypes structures and, when it loads the
 * library, compares every field's name, offset and size, and each structure's size, with the
 * tables bmoe_struct_fields() returns; the mode and log-kind values are compared by name with
 * bmoe_enum_values(). A library that disagrees is not used.
 */
#ifndef BMOE_NATIVE_H
#define BMOE_NATIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* the Python callback the C callback forwards to (capture mode, routing nodes) */
typedef bool (*bmoe_py_cb)(void *t, bool ask, void *ud);

/* what the callback does (struct bmoe_hook.mode) */
enum bmoe_mode {
    BMOE_MODE_IDLE = 0,    /* nothing: every node runs, nothing is asked */
    BMOE_MODE_CAPTURE = 1, /* every node goes to Python (the warm-up decode) */
    BMOE_MODE_ROUTE = 2,   /* only the routing nodes are materialized */
};

/* the log of what the callback did natively (struct bmoe_hook.touch): pairs
 * (layer | kind << 16, expert) that the Python LRU replays in order */
enum bmoe_log_kind {
    BMOE_LOG_HIT = 0,      /* a routed expert was resident: moved to the recent end */
    BMOE_LOG_MISS = 1,     /* a routed expert was not resident (routing order) */
    BMOE_LOG_EVICT = 2,    /* an expert left the LRU (its pages were given back or moved) */
    BMOE_LOG_INSERT = 3,   /* a missed expert was read and entered the recent end */
    BMOE_LOG_PREFETCH = 4, /* an expert predicted for the next layer was read and entered the recent end */
    BMOE_LOG_PAGECACHE = 5, /* a missed expert every byte of which the page cache served (a nowait read) */
};

struct bmoe_cache;
struct bmoe_pool;

struct bmoe_hook {
    bmoe_py_cb py;
    void *py_ud;
    size_t name_offset, ne_offset, nb_offset, data_offset; /* struct ggml_tensor field offsets */
    int mode;          /* enum bmoe_mode */
    int want_weights;  /* route: materialize the routing weights too */
    int skip_resident; /* route: every expert is resident */
    int fast_hits;     /* route: all-resident one-token layers skip Python */
    int n_layer, n_expert;
    const uint8_t *resident; /* [n_layer * n_expert]: 1 = resident */
    uint64_t *layer_hits;    /* [n_layer]: hits counted here, since load */
    int32_t *touch;          /* the log: (layer | kind << 16, expert) pairs */
    int touch_cap, n_touch;
    int fast_misses;           /* route: one-token layers with misses are served here (cache set) */
    struct bmoe_cache *cache;  /* the native LRU mirror and the layers' tensors, or NULL */
    size_t src_offset, type_offset; /* struct ggml_tensor field offsets */
    uint64_t *layer_misses;   /* [n_layer]: misses served here, since load */
    uint8_t *ever;            /* [n_layer * n_expert]: 1 = was resident once (a miss on it is a re-read) */
    uint64_t *layer_pagecache; /* [n_layer]: misses served here whose every byte the page cache held, since load */
    /* frame pools (expert_store.py "frames"), else NULL: the routing node is ffn_moe_weights-<il>
     * (its src[1] the routed ids, rewritten to frame numbers once the layer's experts are in) */
    int32_t *frame_of;    /* [n_layer * n_expert]: the frame of each expert, -1: none */
    int32_t *free_frames; /* a stack of free frames, *n_free of them */
    int32_t *n_free;
};

/* read len bytes at off of fd into dst (direct: fd is O_DIRECT). nowait (buffered only): a first
 * preadv2(RWF_NOWAIT) takes what the page cache holds without blocking, the rest is read as usual;
 * cached (set by bmoe_read): the bytes that first read returned, 0 with O_DIRECT or without nowait */
struct bmoe_job {
    int fd;
    int direct;
    uint64_t off;
    uint64_t len;
    char *dst;
    uint64_t cached;
    int nowait;
};

/* one row of a contract table: a field (name, offset, size) or an enum value (name, value, 0) */
struct bmoe_field {
    const char *name;
    size_t offset;
    size_t size;
};

/* the fields of "bmoe_hook" or "bmoe_job" in declaration order (*n rows, *size = sizeof), or NULL */
const struct bmoe_field *bmoe_struct_fields(const char *name, size_t *n, size_t *size);
/* the values of "bmoe_mode" or "bmoe_log_kind" (*n rows), or NULL */
const struct bmoe_field *bmoe_enum_values(const char *name, size_t *n);

/* the eval callback (llama_context_params.cb_eval; user data: a struct bmoe_hook) */
bool bmoe_eval_cb(void *t, bool ask, void *ud);

/* read lanes */
struct bmoe_pool *bmoe_pool_new(int n_lanes);
int bmoe_pool_lanes(const struct bmoe_pool *p);
int bmoe_read(struct bmoe_pool *p, struct bmoe_job *jobs, int n, int64_t *busy_ns, int *err_job);
void bmoe_pool_free(struct bmoe_pool *p);

/* the native LRU mirror */
struct bmoe_cache *bmoe_cache_new(int n_layer, int n_expert, void *pool);
int bmoe_cache_tensor(struct bmoe_cache *c, int il, void *addr, uint64_t file_off, uint64_t stride, void *map_base,
                      uint64_t map_size, int fd, int direct, int nowait, uint64_t frame_stride);
void bmoe_cache_sync(struct bmoe_cache *c, const int32_t *ids, int n, int64_t budget, int64_t resident_bytes);
void bmoe_cache_take(struct bmoe_cache *c, int64_t *out);
int bmoe_cache_order(const struct bmoe_cache *c, int32_t *out, int cap);
int bmoe_cache_prefetch(struct bmoe_cache *c, int m, const int32_t *next_layer);
void bmoe_cache_settle(struct bmoe_cache *c);
void bmoe_cache_free(struct bmoe_cache *c);

#endif
