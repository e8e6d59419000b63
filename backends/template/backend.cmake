# Descriptor of the template backend (cmake/UnilinkBackends.cmake reads it before any
# target). A copy for a new backend changes NAME, DEFAULT (AUTO: built when its
# dependencies are found) and, if it is compiled into libunilink, KIND.
# OFF: the template is a starting point, built only when asked (-DUNILINK_WITH_TEMPLATE=ON;
# the test plugins.template does so).
unilink_backend(NAME template DEFAULT OFF KIND plugin)
