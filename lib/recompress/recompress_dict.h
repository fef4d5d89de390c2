/* recompress_dict.h - trained dictionaries of the secondary algorithms (internal;
 * recompress_dict.c): dict=auto's first training and its retraining as the stored data grows.
 * recompress.c calls this before each pass. */
#ifndef UZRAM_RECOMPRESS_DICT_H
#define UZRAM_RECOMPRESS_DICT_H

#include <stdbool.h>

struct uzram;

/* Train the dict=auto settings that are due: those not trained yet (once enough pages are
 * stored), and those whose stored data grew well past what they were trained on, as
 * recompress_dict.c's rule says; `quiet`: the device stored nothing new since the previous
 * pass (or a pass was asked for by hand). A failure leaves the setting as it was. */
void recompress_dict_train_due(struct uzram *dev, bool quiet);

#endif
