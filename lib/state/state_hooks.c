/* state_hooks.c - what the rest of the device asks of its state file, each call the same for
 * a device with none (anonymous memory, or nothing to do): where a part keeps its memory, the
 * settings and the codec table saved for a successor, and the state let go at destroy. So
 * that no other part tests whether there is a state file. */
#include <stdatomic.h>

#include "pool/pool.h"
#include "state/state.h"

void state_bind(struct uzram *dev, struct state_file *state)
{
    dev->state = state;
    dev->events = state ? state_events(state) : &dev->own_events;
}

struct state_region state_region(const struct uzram *dev, enum state_part part)
{
    const struct state_file *state = dev->state;
    if (!state)
        return (struct state_region){.fd = -1};
    const struct state_header *header = state->header;
    uint64_t offset = part == STATE_TABLE   ? header->table_offset
                      : part == STATE_DEDUP ? header->dedup_offset
                                            : header->bundle_offset;
    return (struct state_region){.fd = state->fd, .offset = offset, .limited = state->limited};
}

void state_pool_file(struct uzram *dev)
{
    struct state_file *state = dev->state;
    if (state)
        pool_set_file(dev->pool, state->fd, state->header->pool_offset, state->span_dir,
                      state->header->dir_offset);
}

void state_start(struct uzram *dev, bool adopted)
{
    struct state_header *header = dev->state ? dev->state->header : NULL;
    if (header && adopted) {
        dev->clock_base = header->clock_base;
    } else if (header) {
        header->clock_base = dev->clock_base;
        header->same_filled = atomic_load(&dev->same_filled);
        header->use_dedup = atomic_load(&dev->use_dedup);
        header->mem_limit = atomic_load(&dev->mem_limit);
    }
}

void state_save_setting(struct uzram *dev, enum state_setting setting, uint64_t value)
{
    struct state_header *header = dev->state ? dev->state->header : NULL;
    if (!header)
        return;
    if (setting == STATE_SAME_FILLED)
        header->same_filled = (uint32_t)value;
    else if (setting == STATE_USE_DEDUP)
        header->use_dedup = (uint32_t)value;
    else
        header->mem_limit = value;
}

void state_follow_codecs(struct uzram *dev)
{
    if (!dev->state)
        return;
    dev->codecs.saved = state_save_codecs;
    dev->codecs.save_dict = state_save_dict;
    dev->codecs.saved_arg = dev->state;
}

void state_let_go(struct uzram *dev)
{
    if (dev->state)
        state_close(dev->state, true);
}
