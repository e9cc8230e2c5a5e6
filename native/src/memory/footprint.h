/*
 * footprint.h - the process's memory on each device, as MEM_UPDATE reports it (session.c): its part
 * of each device record. Included by nvshare.h.
 *
 * Locking: the counts and `dirty` are atomics that alloc.c and free.c change as allocations come
 * and go (and the client thread clears `dirty`); the `sent_*` fields, what the last MEM_UPDATE
 * said and when, belong to the client thread.
 */
#ifndef NVSHARE_FOOTPRINT_H
#define NVSHARE_FOOTPRINT_H

typedef struct nvs_footprint_dev {
    _Atomic uint64_t managed_bytes; /* movable: converted allocations (either backing), own managed */
    _Atomic uint64_t other_bytes;   /* the program's own VMM memory (cuMemCreate): never moved */
    _Atomic int dirty;              /* changed since the last MEM_UPDATE */
    uint64_t sent_managed, sent_other, sent_ns;
    int sent_valid;
} nvs_footprint_dev;

#endif /* NVSHARE_FOOTPRINT_H */
