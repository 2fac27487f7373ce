/* job_config.h — the rules of a job's configuration, in one place (job_config.c): what each
 * strategy lays out on its devices, the checks of tr_job_config and the defaults it leaves
 * to the model. tr_job_new, tr_job_check and tr_train_run all read them here.
 *
 * Messages name fields as the library does ("layout.chunks 3: ..."), each written in its
 * format as TR__F("layout.chunks"): the field between two marks that tr__error_from_text
 * turns into a tr_error's spans (tr_job.h) and tr__error_unmark removes from plain text.
 * A message with marks never leaves the library: the public calls unmark or convert it.
 *
 *   return tr_errorf(err, n, TR_EINVAL, TR__F("layout.stages") " %d: ...", p);
 */
#ifndef TR_JOB_CONFIG_H
#define TR_JOB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "tr_job.h"
#include "tr_train.h"

/* A field's name in a message, between the marks. */
#define TR__F(field) "\x01" field "\x02"
enum { TR__FIELD_OPEN = '\x01', TR__FIELD_CLOSE = '\x02' };

/* Checks the configuration against its model and fills in what it leaves to the model (the
 * batch, the optimizer, chunks): 0, or TR_EINVAL with a marked message in err. */
int tr__job_config_complete(tr_job_config *c, char *err, size_t n);
/* What the configuration leaves to the model, as tr__job_config_complete fills it in: the
 * optimizer, and the global batch. */
tr_optim_config tr__job_optim(const tr_job_config *c);
int tr__job_global_batch(const tr_job_config *c);
/* The loader's ring depth where layout.prefetch leaves it to the job (synchronous jobs). */
int tr__job_default_prefetch(const tr_job_config *c, int mb_batch);
/* Whether the loader leaves a stage on `dev` to make its samples there (data_on; job.c). */
bool tr__job_generates_on(const tr_job_config *c, const tr_device *dev);
/* The layout of o->strategy on n devices into c (replicas, stages, micro-batches; async's
 * workers), from what the options give (o->job.layout): a marked message when they ask what
 * the strategy does not allow. */
int tr__job_config_layout(tr_job_config *c, const tr_train_options *o, int n, char *err,
                          size_t size);

/* err, another part's message about `field` ("data 'x.npy': ..."): marks the field where
 * the message begins with it. */
void tr__error_mark_lead(char *err, size_t n, const char *field);
/* Removes the marks, in place. */
void tr__error_unmark(char *s);
/* A tr_error from a marked message: its spans where the marks were, its field the first. */
void tr__error_from_text(tr_error *e, int status, const char *marked);

#endif
