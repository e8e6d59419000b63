// UNILINK_TEST_LINK_SHARED
/* Core side of the MPI bootstrap (api/src/bootstrap.c) and the mpi plugin's
 * availability outside a launcher. The MPI paths themselves run under mpirun
 * (ctest mpi.check.*, backends/mpi/mpi_check.c). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unilink/unilink.h>

/* Same prototype as unilink/mpi.h, which needs <mpi.h>. */
UL_API ul_result_t ul_comm_init_mpi_handle(ul_comm_t *comm, const ul_config_t *config, int impl,
                                           int64_t mpi_fortran_handle);

static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE",
                                            "PMI_RANK", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"};

static void clear_launcher(void) {
  for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++)
    unsetenv(launcher_vars[i]);
}

Test(mpi_bootstrap, launched_detection, .init = clear_launcher, .timeout = 10) {
  cr_assert_eq(ul_launched_by_mpi(), 0);
  for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++) {
    setenv(launcher_vars[i], "4", 1);
    cr_assert_eq(ul_launched_by_mpi(), 1, "%s set", launcher_vars[i]);
    setenv(launcher_vars[i], "", 1);
    cr_assert_eq(ul_launched_by_mpi(), 0, "%s empty", launcher_vars[i]);
    unsetenv(launcher_vars[i]);
  }
  cr_assert_eq(ul_launched_by_mpi(), 0);
}

Test(mpi_bootstrap, null_arguments, .init = clear_launcher, .timeout = 10) {
  ul_unique_id_t id;
  int r = 7, n = 7;
  cr_assert_eq(ul_bootstrap_mpi("host", NULL, &r, &n), UL_ERR_INVALID_ARG);
  cr_assert(strstr(ul_last_error(), "id is NULL") != NULL, "%s", ul_last_error());
  cr_assert_eq(ul_bootstrap_mpi("host", &id, NULL, &n), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_bootstrap_mpi("host", &id, &r, NULL), UL_ERR_INVALID_ARG);
  cr_assert_eq(r, 7);
  cr_assert_eq(n, 7);
  cr_assert_eq(ul_comm_init_mpi_handle(NULL, NULL, 1, 0), UL_ERR_INVALID_ARG);
  ul_comm_t c = (ul_comm_t)&id; /* must be reset to NULL on error */
  cr_assert_eq(ul_comm_init_mpi_handle(&c, NULL, 0, 0), UL_ERR_INVALID_ARG);
  cr_assert_null(c);
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "host";
  c = (ul_comm_t)&id;
  cr_assert_eq(ul_comm_init_mpi_handle(&c, &cfg, 1, 0), UL_ERR_INVALID_ARG);
  cr_assert_null(c);
  cr_assert(strstr(ul_last_error(), "needs the mpi backend") != NULL, "%s", ul_last_error());
}

/* Outside mpirun with MPI not initialised, the mpi backend is unavailable and says why;
 * bootstrapping fails with UL_ERR_UNAVAILABLE and leaves the outputs alone. */
Test(mpi_bootstrap, unavailable_without_launcher, .init = clear_launcher, .timeout = 30) {
  ul_backend_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ul_result_t q = ul_backend_query("mpi", &info);
  ul_unique_id_t id;
  memset(&id, 0x5a, sizeof id);
  int r = -3, n = -3;
  cr_assert_eq(ul_bootstrap_mpi("host", &id, &r, &n), UL_ERR_UNAVAILABLE);
  cr_assert(strstr(ul_last_error(), "ul_bootstrap_mpi") != NULL, "%s", ul_last_error());
  cr_assert_eq(r, -3);
  cr_assert_eq(n, -3);
  cr_assert_eq((unsigned char)id.internal[0], 0x5a);
  if (q == UL_ERR_NOT_FOUND) cr_skip_test("mpi plugin not built: availability not checked");
  cr_assert_eq(q, UL_OK);
  cr_assert_eq(info.available, 0);
  cr_assert_eq(info.plugin, 1);
  cr_assert(strstr(info.reason, "not started by mpirun") != NULL, "%s", info.reason);
  cr_assert(strstr(ul_last_error(), "not started by mpirun") != NULL, "%s", ul_last_error());
}
