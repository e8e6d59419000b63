# Descriptor of the nccl backend (cmake/UnilinkBackends.cmake reads it before any target).
# Without a GPU the plugin loads and says why it cannot run, naming the CUDA call.
unilink_backend(NAME nccl DEFAULT AUTO KIND plugin ORDER 40
                CHECK_FEATURES NATIVE_COLL CHECK_REASON "cudaGetDeviceCount" "(code ")
