/* nvtx_recorder.h — what the NVTX recorder (nvtx_recorder.c) keeps, for the tests that read
 * it: a library NVTX loads through NVTX_INJECTION64_PATH, which records every call troupe
 * makes, as Nsight Systems would receive them. */
#ifndef NVTX_RECORDER_H
#define NVTX_RECORDER_H

#include <stdint.h>

typedef enum nvtx_rec_type {
  REC_PUSH,        /* nvtxDomainRangePushEx */
  REC_POP,         /* nvtxDomainRangePop */
  REC_START,       /* nvtxDomainRangeStartEx (id) */
  REC_END,         /* nvtxDomainRangeEnd (id) */
  REC_MARK,        /* nvtxDomainMarkEx */
  REC_THREAD_NAME, /* nvtxNameOsThreadA (tid, message) */
  REC_CATEGORY     /* nvtxDomainNameCategoryA (category, message) */
} nvtx_rec_type;

typedef struct nvtx_rec {
  nvtx_rec_type type;
  uint32_t tid;          /* the calling thread; REC_THREAD_NAME: the thread named */
  const char *domain;    /* NULL: the global domain */
  const char *message;   /* the range's name (registered strings resolved), or NULL */
  int registered;        /* the message came as a registered string */
  uint32_t category, color;
  int has_payload;       /* an int64 payload */
  int64_t payload;
  uint64_t id;           /* REC_START, REC_END */
} nvtx_rec;

/* Exported by the recorder; the tests find them with dlsym. */
typedef int (*nvtx_recorder_count_fn)(void);
typedef const nvtx_rec *(*nvtx_recorder_get_fn)(int i);
typedef void (*nvtx_recorder_reset_fn)(void);

#endif
