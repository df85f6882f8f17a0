/* Page-cache residency of byte ranges of one open file, for bmoe_top/tui/sources/residency.py
 * (compiled once by bmoe_top/cbuild.py). Neither function reads the file's data or changes what
 * is resident: cachestat(2) asks the page cache about a range of the file; mincore(2) asks about
 * the pages of a read-only mapping that is never touched.
 *
 * Both fill counts[i] with the pages of [off[i], off[i] + len[i]) that are in the page cache (a
 * page two ranges share counts for both) and counts[n] with the whole file's, and return 0 or
 * -errno of the call that failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_cachestat
#define __NR_cachestat 451 /* the same number on every architecture of the generic table (Linux 6.5) */
#endif

struct bmoe_cachestat_range {
    uint64_t off, len;
};

struct bmoe_cachestat {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

int64_t bmoe_cachestat_ranges(int fd, int64_t n, const int64_t *off, const int64_t *len, int64_t *counts)
{
    struct bmoe_cachestat_range r;
    struct bmoe_cachestat cs;
    for (int64_t i = 0; i <= n; i++) {
        if (i < n && len[i] <= 0) {
            counts[i] = 0;
            continue;
        }
        r.off = i < n ? (uint64_t)off[i] : 0;
        r.len = i < n ? (uint64_t)len[i] : 0; /* 0: to the end of the file */
        if (syscall(__NR_cachestat, fd, &r, &cs, 0) != 0)
            return -(int64_t)errno;
        counts[i] = (int64_t)cs.nr_cache;
    }
    return 0;
}

int64_t bmoe_mincore_ranges(void *addr, int64_t size, int64_t page, int64_t n, const int64_t *off,
                            const int64_t *len, unsigned char *vec, int64_t *counts)
{
    int64_t npages = (size + page - 1) / page;
    int64_t total = 0;
    if (size <= 0) {
        for (int64_t i = 0; i <= n; i++)
            counts[i] = 0;
        return 0;
    }
    if (mincore(addr, (size_t)size, vec) != 0)
        return -(int64_t)errno;
    for (int64_t p = 0; p < npages; p++)
        total += vec[p] & 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = 0;
        if (len[i] > 0 && off[i] >= 0) {
            int64_t first = off[i] / page, last = (off[i] + len[i] - 1) / page;
            if (last >= npages)
                last = npages - 1;
            for (int64_t p = first; p <= last; p++)
                c += vec[p] & 1;
        }
        counts[i] = c;
    }
    counts[n] = total;
    return 0;
}
