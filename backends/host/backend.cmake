# Descriptor of the host backend (cmake/UnilinkBackends.cmake reads it before any target).
unilink_backend(NAME host DEFAULT AUTO KIND builtin ORDER 10)
