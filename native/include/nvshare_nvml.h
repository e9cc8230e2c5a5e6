/*
 * nvshare_nvml.h - the NVML types and constants the interposer uses, declared by hand (the NVML
 * ABI of nvml.h; no driver headers are needed to build).
 *
 *   nvmlMemory_t     {total, free, used}                     used = total - free (reserved included)
 *   nvmlMemory_v2_t  {version, total, reserved, free, used}  version = nvmlMemory_v2; used includes
 *                                                            reserved
 */
#ifndef NVSHARE_NVML_H
#define NVSHARE_NVML_H

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
};

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_STRUCT_VERSION(data, ver) \
    (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((unsigned int)(ver) << 24U))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2) /* 0x02000028 on LP64 */

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96

#endif /* NVSHARE_NVML_H */
