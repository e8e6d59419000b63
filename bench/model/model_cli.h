/* Pieces of unilink-model shared by its command files. */
#ifndef UNILINK_MODEL_CLI_H
#define UNILINK_MODEL_CLI_H
#include <stdio.h>

#include "ul_model.h"

extern ulsim_catalog_t g_cat;
extern const char *model_coll_names[UL_COLL_COUNT];
int model_usage(FILE *f);
int model_coll_parse(const char *s, ul_coll_t *c);
const char *model_opt(int argc, char **argv, const char *name, const char *alt);
int model_load_topo(const char *spec, ulsim_topology_t *t);
int model_cmd_calibrate(int argc, char **argv);
int model_cmd_validate(int argc, char **argv);
#endif
