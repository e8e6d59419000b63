/* unilink-model calibrate and validate (model_fit.c). */
#ifndef UNILINK_MODEL_FIT_H
#define UNILINK_MODEL_FIT_H
int model_cmd_calibrate(int argc, char **argv);
int model_cmd_validate(int argc, char **argv);
#endif
