/*
 * ptrtab.c - the pointer/handle table of alloc.c (ptrtab.h): linear probing, power-of-two
 * capacity, tombstones on delete, grown (or rehashed in place when mostly tombstones) past half
 * full.
 */
#include <stdlib.h>
#include <string.h>

#include "core/nvshare.h"
#include "memory/ptrtab.h"

static size_t hash64(uint64_t k, size_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

nvs_ptr_entry *nvs_ptrtab_find(nvs_ptrtab *t, uint64_t key)
{
    if (!t->cap) return NULL;
    for (size_t i = hash64(key, t->cap), n = 0; n < t->cap; i = (i + 1) & (t->cap - 1), n++) {
        nvs_ptr_entry *e = &t->s[i];
        if (e->state == 0) return NULL;
        if (e->state == 1 && e->key == key) return e;
    }
    return NULL;
}

static int grow(nvs_ptrtab *t)
{
    size_t ncap = t->cap ? t->cap * 2 : 256;
    if (t->used * 4 < t->cap) ncap = t->cap; /* mostly tombstones: rehash in place size */
    nvs_ptr_entry *ns = calloc(ncap, sizeof(nvs_ptr_entry));
    if (!ns) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->s[i].state != 1) continue;
        size_t j = hash64(t->s[i].key, ncap);
        while (ns[j].state) j = (j + 1) & (ncap - 1);
        ns[j] = t->s[i];
    }
    free(t->s);
    t->s = ns;
    t->cap = ncap;
    t->dead = 0;
    return 0;
}

int nvs_ptrtab_put(nvs_ptrtab *t, uint64_t key, uint64_t size, int dev, int kind)
{
    nvs_ptr_entry *e = nvs_ptrtab_find(t, key);
    if (!e) {
        if ((t->used + t->dead + 1) * 2 > t->cap && grow(t) != 0) return -1;
        size_t i = hash64(key, t->cap);
        while (t->s[i].state == 1) i = (i + 1) & (t->cap - 1);
        e = &t->s[i];
        if (e->state == 2) t->dead--;
        t->used++;
        e->out = 0;
        e->sum_valid = e->discard_due = e->cold = e->pin_refused = e->filled = 0;
        e->host = NULL;
    }
    e->key = key;
    e->size = size;
    e->dev = dev;
    e->kind = (uint8_t)kind;
    e->state = 1;
    return 0;
}

void nvs_ptrtab_del(nvs_ptrtab *t, nvs_ptr_entry *e)
{
    e->state = 2;
    t->used--;
    t->dead++;
}

int nvs_ptrtab_take(nvs_ptrtab *t, uint64_t key, nvs_ptr_entry *out)
{
    nvs_ptr_entry *e = nvs_ptrtab_find(t, key);
    if (!e) return 0;
    *out = *e;
    nvs_ptrtab_del(t, e);
    return 1;
}

const nvs_ptr_entry *nvs_ptrtab_next(const nvs_ptrtab *t, size_t *pos)
{
    while (*pos < t->cap) {
        const nvs_ptr_entry *e = &t->s[(*pos)++];
        if (e->state == 1) return e;
    }
    return NULL;
}

void nvs_ptrtab_clear(nvs_ptrtab *t)
{
    free(t->s);
    memset(t, 0, sizeof(*t));
}
