# Descriptor of the mpi backend (cmake/UnilinkBackends.cmake reads it before any target).
unilink_backend(NAME mpi DEFAULT AUTO KIND plugin ORDER 30)
