/* uzram_stats.h - the list of libuzram's counters (UZRAM_STATS), part of the public API:
 * uzram.h includes it, and programs include uzram.h, not this file. Apart so that the one
 * list every counter follows is one file of its own. */
#ifndef UZRAM_STATS_LIST_H
#define UZRAM_STATS_LIST_H

/* Every counter, in order: UZRAM_STATS(X) expands X(name, form, kind, help)
 * once per counter. This list is the one place a counter is named and
 * described: struct uzram_stats, the text forms of uzram.h, the attributes
 * mm_stat, io_stat, debug_stat and stat_json, uzram_stat_name(),
 * uzram_stat_help(), uzram_stat_kind() and what the programs show (the
 * control socket's `stats` reply, `uzram status`, its Prometheus text) all
 * follow it.
 * `form` is the text line a counter also appears in, besides JSON:
 *   MM     mm_stat: zram's nine fields in zram's order, then the two of the
 *          zram dedup patch set (keep this order: scripts read mm_stat by
 *          position)
 *   IO     io_stat: zram's four fields in zram's order
 *   BD     bd_stat: zram's three fields of the backing store, in 4 KiB pages
 *          (bd_count: blocks of the store in use; bd_reads, bd_writes: pages
 *          read from and written to it)
 *   DEBUG  debug_stat, as "name: value" lines
 * `kind` is LEVEL for an amount held now, which goes up and down (a gauge),
 * or EVENTS for a count of events, which only grows until the device is
 * reset (a counter). `help` says what is counted, and in which unit, in one
 * line. New counters go at the end, so that older callers' structs stay a
 * prefix. */
#define UZRAM_STATS(X)                                                                             \
    X(orig_data_size, MM, LEVEL, "bytes of data stored, 4096 per page in whatever form")           \
    X(compr_data_size, MM, LEVEL, "bytes of the distinct stored objects (4096 per raw page)")      \
    X(mem_used_total, MM, LEVEL,                                                                   \
      "bytes of memory the pool holds, fragmentation included, and the dictionaries")              \
    X(mem_limit, MM, LEVEL, "most bytes of memory the pool may hold (0: no limit)")                \
    X(mem_used_max, MM, LEVEL,                                                                     \
      "peak of the pool's memory since creation or reset, and the dictionaries now, in bytes")     \
    X(same_pages, MM, LEVEL, "pages stored as one repeated 8-byte word (zero pages included)")     \
    X(pages_compacted, MM, EVENTS, "pool pages given back by compaction")                          \
    X(huge_pages, MM, LEVEL, "pages stored raw now, as they did not compress")                     \
    X(huge_pages_since, MM, EVENTS, "pages stored raw")                                            \
    X(dup_data_size, MM, LEVEL, "bytes that pages stored once for several did not take")           \
    X(meta_data_size, MM, LEVEL, "memory of the dedup index and of the bundles' records, bytes")   \
    X(failed_reads, IO, EVENTS, "reads that failed (a page did not decompress)")                   \
    X(failed_writes, IO, EVENTS, "writes that failed (no space, no memory, I/O error)")            \
    X(invalid_io, IO, EVENTS, "requests refused as misaligned or out of range")                    \
    X(notify_free, IO, EVENTS, "pages freed by discard or write-zeroes")                           \
    X(dedup_hash_collisions, DEBUG, EVENTS, "dedup hash matches whose content differed")           \
    X(pages_stored, DEBUG, LEVEL, "pages stored, in whatever form (orig_data_size / 4096)")        \
    X(zero_pages, DEBUG, LEVEL, "pages stored as the word 0 (part of same_pages)")                 \
    X(idle_pages, DEBUG, LEVEL, "pages marked idle and not read or written since")                 \
    X(recomp_pages, DEBUG, EVENTS, "objects recompressed into a smaller form")                     \
    X(recomp_bytes, DEBUG, EVENTS, "bytes those objects had before recompression")                 \
    X(recomp_saved_bytes, DEBUG, EVENTS, "bytes recompression saved (before minus after)")         \
    X(incompressible_pages, DEBUG, LEVEL, "pages no secondary algorithm shrinks, skipped")         \
    X(dict_mem, DEBUG, LEVEL, "bytes of memory of dictionaries (part of mem_used_total)")          \
    X(bd_count, BD, LEVEL, "4 KiB blocks of the backing store in use")                             \
    X(bd_reads, BD, EVENTS, "pages read from the backing store")                                   \
    X(bd_writes, BD, EVENTS, "pages written to the backing store (written back or moved)")         \
    X(bd_objects, DEBUG, LEVEL, "objects on the backing store (a shared dedup object once)")       \
    X(bd_data_size, DEBUG, LEVEL, "bytes of the objects on the backing store (4096 per raw page)") \
    X(bd_write_errors, DEBUG, EVENTS, "writes to the backing store that failed (pages stayed)")    \
    X(bd_nospace, DEBUG, EVENTS, "writebacks that found the backing store full (pages stayed)")    \
    X(writeback_limit, DEBUG, LEVEL, "pages writeback may still write (writeback_limit_enable)")   \
    X(writeback_limit_enable, DEBUG, LEVEL, "1: writeback stops when writeback_limit is used up")  \
    X(bd_checksum_errors, DEBUG, EVENTS,                                                           \
      "reads of the backing store that did not match what was written (answered EIO)")             \
    X(table_mem, DEBUG, LEVEL,                                                                     \
      "bytes of memory the page table may take, 16 per 4 KiB page of the disk (not in the pool)")  \
    X(dedup_entries, DEBUG, LEVEL,                                                                 \
      "unique objects the dedup index holds (meta_data_size / it: bytes per entry, no bundles)")   \
    X(bundles, DEBUG, LEVEL, "bundles: objects holding several neighbouring pages")                \
    X(bundled_pages, DEBUG, LEVEL, "pages stored in bundles (live members)")                       \
    X(bundle_dead_pages, DEBUG, LEVEL, "members of bundles written or discarded since (dead)")     \
    X(bundle_saved_bytes, DEBUG, LEVEL,                                                            \
      "bytes the pages of the bundles took alone when packed, minus the bundles' bytes")           \
    X(dict_trainings, DEBUG, EVENTS, "dict=auto dictionaries trained (the first and retrainings)") \
    X(recomp_passes, DEBUG, EVENTS,                                                                \
      "passes over the page table the background recompressor ended")                              \
    X(reserve_empty, DEBUG, EVENTS,                                                                \
      "objects not stored as the memory reserve (serve --swap) had no pool memory ready "          \
      "(writes among them failed: failed_writes)")                                                 \
    X(bundle_mem, DEBUG, LEVEL, "memory the bundles' records take, bytes (in meta_data_size)")     \
    X(state_lock_timeouts, DEBUG, EVENTS,                                                          \
      "waits on a lock word of the state file that passed their deadline (answered EIO)")          \
    X(cached_mem, DEBUG, LEVEL,                                                                    \
      "bytes of pool memory resident that hold no object: the reserve of serve --swap and "        \
      "emptied spans kept for the next ones (not in mem_used_total)")

#endif /* UZRAM_STATS_LIST_H */
