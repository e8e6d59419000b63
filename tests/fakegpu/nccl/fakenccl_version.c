/* ncclGetVersion of the fake NCCL: alone in this file so the "old NCCL" fake
 * (../nccl_backend) can take every other source and report an older version. */
#include <nccl.h>

#include "fakenccl_int.h"

FN_API ncclResult_t ncclGetVersion(int *version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
