# Descriptor of the sim backend (cmake/UnilinkBackends.cmake reads it before any target).
unilink_backend(NAME sim DEFAULT AUTO KIND builtin ORDER 20)
