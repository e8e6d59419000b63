# Descriptor of the ze backend (cmake/UnilinkBackends.cmake reads it before any target).
# Without an Intel GPU the plugin loads and names zeInit and its raw result in the reason.
unilink_backend(NAME ze DEFAULT AUTO KIND plugin ORDER 60
                CHECK_FEATURES GENERIC_COLL DEVICE_MEMORY INIT_ALL
                CHECK_REASON "zeInit" "(0x" "ZE_RESULT_"
                CHECK_DESCRIPTION "staged through host memory (v1)")
