/* The fake NCCL as an NCCL 2.18.1 would look to the plugin: the same implementation
 * (../nccl/fakenccl.c), with ncclGetVersion renamed so old_nccl_version.c can report the
 * old version; the library's version script (generated from backends/nccl/
 * nccl_symbols.txt) exports only the entry points 2.18.1 has, so ncclMemAlloc,
 * ncclCommWindowRegister and ncclAlltoAll/Gather/Scatter are absent exactly as they
 * would be (dlsym finds nothing). */
#define ncclGetVersion fakegpu_full_ncclGetVersion
#include "fakenccl.c"
