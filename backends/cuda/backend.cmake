# Descriptor of the cuda backend (cmake/UnilinkBackends.cmake reads it before any target).
# Without a GPU the plugin loads and says why it cannot run, naming the CUDA call.
unilink_backend(NAME cuda DEFAULT AUTO KIND plugin ORDER 50
                CHECK_FEATURES GENERIC_COLL CHECK_REASON "cudaGetDeviceCount" "(code ")
