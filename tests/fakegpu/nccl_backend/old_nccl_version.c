/* ncclGetVersion of the "old NCCL" fake: FAKEGPU_NCCL_VERSION_CODE, else 21801 (2.18.1). */
#include <nccl.h>
#include <stdlib.h>

__attribute__((visibility("default"))) ncclResult_t ncclGetVersion(int *version) {
  if (!version) return ncclInvalidArgument;
  const char *v = getenv("FAKEGPU_NCCL_VERSION_CODE");
  *version = v && *v ? atoi(v) : 21801;
  return ncclSuccess;
}
