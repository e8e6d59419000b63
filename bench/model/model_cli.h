/* Pieces of unilink-model shared by its command files (defined in model_cli.c). */
#ifndef UNILINK_MODEL_CLI_H
#define UNILINK_MODEL_CLI_H
#include <stdio.h>

#include "ul_model.h"

extern ulsim_catalog_t g_cat;
extern const char *model_coll_names[UL_COLL_COUNT];
/* Topology parameters of collective and train (given by model_topo_params), applied by
 * model_load_topo to every topology loaded after it. */
extern ulsim_topo_params_t g_topo_params;
extern int g_topo_params_set;

int model_usage(FILE *f);
int model_coll_parse(const char *s, ul_coll_t *c);
const char *model_opt(int argc, char **argv, const char *name, const char *alt);
int model_num(const char *text, const char *what, double *out);
int model_size(const char *text, const char *what, double *out);
int model_whole(const char *s, const char *what, int lo, int hi, int *out);
int model_topo_params(int argc, char **argv);
int model_load_topo(const char *spec, ulsim_topology_t *t);
char *model_read(const char *path);
#endif
