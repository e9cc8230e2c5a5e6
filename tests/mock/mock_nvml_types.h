/*
 * mock_nvml_types.h - the NVML types the mock NVML and the test app use, declared here by hand,
 * independently of native/include/nvshare_nvml.h, so that a wrong declaration in the library
 * shows up as a failing test instead of being shared.
 */
#ifndef MOCK_NVML_TYPES_H
#define MOCK_NVML_TYPES_H

typedef int nvmlReturn_t;
typedef struct mock_nvml_device *nvmlDevice_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

/* NVML_STRUCT_VERSION(Memory, 2): sizeof | 2 << 24 */
#define MOCK_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

#endif
