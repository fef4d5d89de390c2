/* report.c - what `uzram estimate` prints: the projections, a table, or JSON.
 * The memory models of kernel zram, zram with the dedup patch and uzram are computed here. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "estimate/estimate.h"
#include "common/text.h"
#include "uzram.h"

/*
 * Models, from the length distribution of the pages (see docs/estimate.md):
 * - every model stores same-filled pages as one word: no pool memory;
 * - a page that compresses to more than the engine's huge threshold is kept
 *   raw (4096 bytes) by every model;
 * - pool memory of an object is uzram_pool_object_cost(length), the engine's
 *   size-class pool averaged over full pool pages. Kernel zram is modelled
 *   with the same pool (uzram's pool plays the part of zsmalloc), so the
 *   kernel and uzram columns differ only in their dedup metadata;
 * - without dedup every non-same-filled page is an object; with dedup each
 *   distinct content is one object, plus per object the dedup patch's 48-byte
 *   zram_entry (what its meta_data_size counts) or uzram's
 *   uzram_dedup_entry_cost().
 */
void estimate_project(const struct estimate_counts *counts, unsigned algorithm,
                      struct estimate_projection *projection)
{
    memset(projection, 0, sizeof *projection);
    if (!counts->lengths)
        return;
    const struct estimate_lengths *lengths = &counts->lengths[algorithm];
    double pool_all = 0, pool_unique = 0;
    for (unsigned length = 1; length <= ESTIMATE_RAW; length++) {
        uint64_t all = lengths->all[length], unique = lengths->unique[length];
        if (!all && !unique)
            continue;
        double cost = uzram_pool_object_cost(length);
        pool_all += cost * (double)all;
        pool_unique += cost * (double)unique;
        projection->compressed_all += (uint64_t)length * all;
        projection->compressed_unique += (uint64_t)length * unique;
    }
    projection->huge_all = lengths->all[ESTIMATE_RAW];
    projection->huge_unique = lengths->unique[ESTIMATE_RAW];
    projection->kernel_zram = pool_all;
    projection->uzram = pool_all;
    projection->dedup_patch_pool = pool_unique;
    projection->uzram_dedup_pool = pool_unique;
    projection->dedup_patch_meta = (double)counts->unique_pages * ESTIMATE_DEDUP_PATCH_ENTRY_BYTES;
    projection->uzram_dedup_meta = (double)counts->unique_pages * (double)uzram_dedup_entry_cost();
}

static double percent(double part, double whole)
{
    return whole > 0 ? 100.0 * part / whole : 0.0;
}

static double average(uint64_t sum, uint64_t pages)
{
    return pages ? (double)sum / (double)pages : 0.0;
}

static const char *kind_name(enum estimate_source_kind kind)
{
    switch (kind) {
    case SOURCE_FILE:
        return "file";
    case SOURCE_DEVICE:
        return "device";
    case SOURCE_STDIN:
        return "stdin";
    case SOURCE_PROCESS:
        return "process";
    case SOURCE_DIRECTORY:
        return "directory";
    }
    return "?";
}

static const char *human(uint64_t bytes, char *buf, size_t size)
{
    util_human_size(bytes, buf, size);
    return buf;
}

/* ------------------------------------------------------------------------
 * Text
 * ---------------------------------------------------------------------- */

/* What a directory's walk read and passed over, on one line. */
static void directory_note(FILE *out, const struct estimate_source *source)
{
    const struct estimate_skipped *k = &source->skipped;
    const struct {
        uint64_t count;
        const char *one, *many;
    } reasons[] = {
        {k->devices, "device", "devices"},
        {k->sockets, "socket or pipe", "sockets and pipes"},
        {k->links, "symbolic link", "symbolic links"},
        {k->other_file_systems, "mount point", "mount points"},
        {k->unreadable, "unreadable", "unreadable"},
    };
    fprintf(out,
            "  %s: %" PRIu64 " file%s read, each from a page boundary; skipped: ", source->name,
            source->files, source->files == 1 ? "" : "s");
    bool any = false;
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
        if (reasons[i].count == 0)
            continue;
        fprintf(out, "%s%" PRIu64 " %s", any ? ", " : "", reasons[i].count,
                reasons[i].count == 1 ? reasons[i].one : reasons[i].many);
        any = true;
    }
    fputs(any ? "\n" : "nothing\n", out);
}

static void class_cell(FILE *out, uint64_t count, uint64_t pages)
{
    char cell[32];
    snprintf(cell, sizeof cell, "%" PRIu64 " %5.1f%%", count,
             percent((double)count, (double)pages));
    fprintf(out, " %17s", cell);
}

/* Source names are never cut: the first column is as wide as the longest. */
static void class_row(FILE *out, int name_width, const char *name,
                      const struct estimate_counts *counts)
{
    fprintf(out, "%-*s %11" PRIu64, name_width, name, counts->pages);
    class_cell(out, counts->zero_pages, counts->pages);
    class_cell(out, counts->same_pages, counts->pages);
    class_cell(out, counts->duplicate_pages, counts->pages);
    class_cell(out, counts->unique_pages, counts->pages);
    fputc('\n', out);
}

static void model_cell(FILE *out, double pool, double meta, double input)
{
    char cell[48], size[16];
    snprintf(cell, sizeof cell, "%s %5.1f%%",
             human((uint64_t)(pool + meta + 0.5), size, sizeof size), percent(pool + meta, input));
    fprintf(out, " %17s", cell);
}

static void projection_table(FILE *out, const struct estimate_options *options, const char *title,
                             const struct estimate_counts *counts)
{
    double input = (double)counts->pages * (double)options->page_size;
    char size[16];
    fprintf(out, "\nProjected memory for %s (%s of pages; %% of that):\n", title,
            human((uint64_t)input, size, sizeof size));
    fprintf(out, "%-16s %17s %17s %17s %17s %11s %11s\n", "algorithm", "kernel zram",
            "zram+dedup patch", "uzram", "uzram+dedup", "huge pages", "ratio");
    for (unsigned a = 0; a < options->algorithm_count; a++) {
        struct estimate_projection p;
        estimate_project(counts, a, &p);
        fprintf(out, "%-16s", options->algorithms[a]);
        model_cell(out, p.kernel_zram, 0, input);
        model_cell(out, p.dedup_patch_pool, p.dedup_patch_meta, input);
        model_cell(out, p.uzram, 0, input);
        model_cell(out, p.uzram_dedup_pool, p.uzram_dedup_meta, input);
        double best = p.uzram_dedup_pool + p.uzram_dedup_meta;
        fprintf(out, " %11" PRIu64 " %10.2fx\n", p.huge_unique, best > 0 ? input / best : 0.0);
    }
}

/* uzram+dedup memory with `hot` of the pages in the primary's form and the
 * rest in entry `cold`'s (what recompression keeps), plus the dictionary. */
static double recompressed_memory(const struct estimate_options *options,
                                  const struct estimate_counts *counts, unsigned cold, double hot)
{
    struct estimate_projection first, then;
    estimate_project(counts, options->recompression.primary, &first);
    estimate_project(counts, cold, &then);
    unsigned from = (unsigned)options->specs[cold].from[1];
    return hot * first.uzram_dedup_pool + (1 - hot) * then.uzram_dedup_pool +
           first.uzram_dedup_meta + (double)options->specs[from].dict_memory;
}

/* recompressed_memory() with the dictionary, less what bundles save on the cold share. */
static double bundled_memory(const struct estimate_options *options,
                             const struct estimate_counts *counts, double hot)
{
    double saved = counts->bundle_single_cost - counts->bundle_cost;
    return recompressed_memory(options, counts, options->recompression.recompressed_dict, hot) -
           (1 - hot) * saved;
}

static void recompression_row(FILE *out, const char *label, double memory, double input)
{
    char size[16];
    fprintf(out, "  %-58s %10s %5.1f%% %7.2fx\n", label,
            human((uint64_t)(memory + 0.5), size, sizeof size), percent(memory, input),
            memory > 0 ? input / memory : 0.0);
}

static void recompression_table(FILE *out, const struct estimate_options *options,
                                const struct estimate_counts *counts)
{
    const struct estimate_recompression *r = &options->recompression;
    double input = (double)counts->pages * (double)options->page_size;
    double hot = r->hot_percent / 100.0;
    struct estimate_projection first;
    estimate_project(counts, r->primary, &first);
    const char *primary = options->algorithms[r->primary];
    const char *secondary = options->algorithms[r->secondary];
    fprintf(out,
            "\nRecompression (uzram serve --dedup --recompress-idle): %u%% of the pages taken as "
            "hot (--hot)\nstay %s; the others are recompressed with %s once idle, kept only "
            "where smaller:\n",
            r->hot_percent, primary, secondary);
    char label[96];
    snprintf(label, sizeof label, "%s only", primary);
    recompression_row(out, label, first.uzram_dedup_pool + first.uzram_dedup_meta, input);
    snprintf(label, sizeof label, "%s, the cold pages %s", primary, secondary);
    recompression_row(out, label, recompressed_memory(options, counts, r->recompressed, hot),
                      input);
    if (r->recompressed_dict != r->recompressed) {
        const struct estimate_algorithm *dict = &options->specs[r->secondary_dict];
        char size[16];
        if (dict->dict_trained)
            snprintf(label, sizeof label, "%s, the cold pages %s + dictionary (%s)", primary,
                     secondary, human(dict->dict_memory, size, sizeof size));
        else
            snprintf(label, sizeof label, "(too few pages to train a dictionary)");
        recompression_row(out, label,
                          recompressed_memory(options, counts, r->recompressed_dict, hot), input);
    }
    if (r->group) {
        snprintf(label, sizeof label, "... and bundles of %u (%" PRIu64 " pages in %" PRIu64 ")",
                 r->group, counts->bundled_pages, counts->bundles);
        recompression_row(out, label, bundled_memory(options, counts, hot), input);
    }
    fputs("  (uzram+dedup memory: the hot share in the first form, the rest in what\n"
          "   recompression keeps, the index, and the dictionary trained on 2048 pages\n"
          "   spread over the first source (a stream: its first pages); ratio: pages /\n"
          "   memory)\n",
          out);
}

/* The table of page classes, a row per source (and the total), with the notes on how each
 * source was read. */
static void classes_table(FILE *out, struct estimate_source *sources, size_t source_count,
                          const struct estimate_counts *total)
{
    char size[16], size2[16];
    int name_width = (int)strlen("source");
    for (size_t i = 0; i < source_count; i++)
        if ((int)strlen(sources[i].name) > name_width)
            name_width = (int)strlen(sources[i].name);
    fprintf(out, "\n%-*s %11s %17s %17s %17s %17s\n", name_width, "source", "pages", "zero",
            "same-filled", "duplicate", "unique");
    for (size_t i = 0; i < source_count; i++)
        class_row(out, name_width, sources[i].name, &sources[i].counts);
    if (source_count > 1)
        class_row(out, name_width, "total", total);
    for (size_t i = 0; i < source_count; i++) {
        const struct estimate_counts *c = &sources[i].counts;
        if (sources[i].kind == SOURCE_DIRECTORY)
            directory_note(out, &sources[i]);
        else if (c->partial_bytes)
            fprintf(out, "  %s: last page partial (%" PRIu64 " bytes), padded with zeros\n",
                    sources[i].name, c->partial_bytes);
        if (sources[i].kind == SOURCE_PROCESS)
            fprintf(out,
                    "  %s: %zu mappings, %s mapped, %" PRIu64 " pages never touched (skipped), "
                    "%s unreadable (skipped)\n",
                    sources[i].name, sources[i].mapping_count,
                    human(sources[i].mapped_bytes, size, sizeof size), c->unpopulated_pages,
                    human(c->unreadable_bytes, size2, sizeof size2));
    }
    fputs("  (same-filled: one non-zero 8-byte word repeated; duplicate: same content as a page\n"
          "   seen earlier in the run, matched by 64-bit XXH3 hash)\n",
          out);
}

/* The duplicate-reference histogram (like zdb -S) and the dedup index it would take. */
static void duplicates_table(FILE *out, const struct estimate_options *options,
                             const struct estimate_bucket *buckets,
                             const struct estimate_index_info *info)
{
    char size[16], size2[16], size3[16], size4[16];
    fputs("\nDuplicate references (like zdb -S; same-filled pages hold no object, not counted)\n",
          out);
    const char *compressed_label = options->algorithm_count ? options->algorithms[0] : "";
    fprintf(out, "%-11s %10s %10s %10s %10s %10s %10s\n", "refs", "contents", "stored",
            options->algorithm_count ? compressed_label : "-", "pages", "referenced",
            options->algorithm_count ? compressed_label : "-");
    uint64_t contents = 0, pages = 0, compressed = 0, referenced_compressed = 0;
    for (unsigned b = 0; b < ESTIMATE_BUCKETS; b++) {
        const struct estimate_bucket *bucket = &buckets[b];
        if (!bucket->contents)
            continue;
        char refs[32];
        uint64_t low = b == 0 ? 1 : (1ull << (b - 1)) + 1, high = 1ull << b;
        if (low == high)
            snprintf(refs, sizeof refs, "%" PRIu64, low);
        else
            snprintf(refs, sizeof refs, "%" PRIu64 "-%" PRIu64, low, high);
        fprintf(out, "%-11s %10" PRIu64 " %10s %10s %10" PRIu64 " %10s %10s\n", refs,
                bucket->contents, human(bucket->contents * options->page_size, size, sizeof size),
                options->algorithm_count ? human(bucket->compressed_bytes, size2, sizeof size2)
                                         : "-",
                bucket->pages, human(bucket->pages * options->page_size, size3, sizeof size3),
                options->algorithm_count
                    ? human(bucket->referenced_compressed_bytes, size4, sizeof size4)
                    : "-");
        contents += bucket->contents;
        pages += bucket->pages;
        compressed += bucket->compressed_bytes;
        referenced_compressed += bucket->referenced_compressed_bytes;
    }
    fprintf(out, "%-11s %10" PRIu64 " %10s %10s %10" PRIu64 " %10s %10s\n", "total", contents,
            human(contents * options->page_size, size, sizeof size),
            options->algorithm_count ? human(compressed, size2, sizeof size2) : "-", pages,
            human(pages * options->page_size, size3, sizeof size3),
            options->algorithm_count ? human(referenced_compressed, size4, sizeof size4) : "-");
    fprintf(out, "dedup ratio %.2fx; index: %" PRIu64 " entries in %s\n",
            contents ? (double)pages / (double)contents : 1.0, info->entries,
            human(info->memory_bytes, size, sizeof size));
}

void estimate_report_text(FILE *out, const struct estimate_options *options,
                          struct estimate_source *sources, size_t source_count,
                          const struct estimate_counts *total,
                          const struct estimate_bucket *buckets,
                          const struct estimate_index_info *info)
{
    fprintf(out, "uzram estimate: %zu source%s, page size %zu, %u thread%s\n", source_count,
            source_count == 1 ? "" : "s", options->page_size, options->jobs,
            options->jobs == 1 ? "" : "s");

    classes_table(out, sources, source_count, total);

    if (options->algorithm_count) {
        if (source_count > 1)
            for (size_t i = 0; i < source_count; i++)
                projection_table(out, options, sources[i].name, &sources[i].counts);
        projection_table(out, options, source_count > 1 ? "the total" : sources[0].name, total);
        fputs("  kernel zram: same-filled pages + compression. zram+dedup patch: kernel zram with\n"
              "  the deduplication patch set proposed for it (\"zram: implement deduplication in\n"
              "  zram\", v4, Joonsoo Kim, 2017; not in mainline), 48 bytes of zram_entry per\n"
              "  stored object. uzram+dedup: uzram --dedup, with its own index entry per object.\n"
              "  Pool memory is uzram's size-class pool (uzram_pool_object_cost) for all four.\n"
              "  ratio: pages / uzram+dedup memory; huge: unique pages kept raw.\n",
              out);
        unsigned asked =
            options->recompression.on ? options->recompression.secondary : options->algorithm_count;
        if (asked == 1)
            fputs(
                "  Other algorithms: --algorithms all (or a list such as lz4,zstd); recompression\n"
                "  of the cold pages: --recompress zstd:7.\n",
                out);
        if (options->recompression.on)
            recompression_table(out, options, total);
    } else if (options->page_size != UZRAM_PAGE_SIZE) {
        fprintf(out,
                "\nCompression is only estimated for %u-byte pages (the engine's page size).\n",
                UZRAM_PAGE_SIZE);
    } else {
        fputs("\nNo compression asked for (-a none): no memory projections.\n", out);
    }

    duplicates_table(out, options, buckets, info);

    fprintf(out,
            "\nSame-filled check: words compared per page of %zu words, by zram's forward loop,\n"
            "a backward loop, and the last-word pre-check of the kernel patch \"zram: try to\n"
            "avoid worst-case scenario on same element pages\" (Taejoon Song, 2019):\n",
            options->page_size / ESTIMATE_WORD);
    fprintf(out, "  forward scan          %8.2f\n", average(total->scan_forward, total->pages));
    fprintf(out, "  backward scan         %8.2f\n", average(total->scan_backward, total->pages));
    fprintf(out, "  last-word pre-check   %8.2f\n", average(total->scan_precheck, total->pages));
}

/* ------------------------------------------------------------------------
 * JSON
 * ---------------------------------------------------------------------- */

static void json_model(FILE *out, const char *name, double pool, double meta, bool last)
{
    fprintf(out, "\"%s\": {\"pool_bytes\": %.0f, \"meta_bytes\": %.0f, \"total_bytes\": %.0f}%s",
            name, pool, meta, pool + meta, last ? "" : ", ");
}

static void json_counts(FILE *out, const struct estimate_options *options,
                        const struct estimate_counts *c, const char *indent)
{
    fprintf(out,
            "%s\"bytes\": %" PRIu64 ", \"pages\": %" PRIu64 ", \"partial_bytes\": %" PRIu64
            ", \"unreadable_bytes\": %" PRIu64 ", \"unpopulated_pages\": %" PRIu64 ",\n",
            indent, c->bytes, c->pages, c->partial_bytes, c->unreadable_bytes,
            c->unpopulated_pages);
    fprintf(out,
            "%s\"zero_pages\": %" PRIu64 ", \"same_pages\": %" PRIu64
            ", \"duplicate_pages\": %" PRIu64 ", \"unique_pages\": %" PRIu64 ",\n",
            indent, c->zero_pages, c->same_pages, c->duplicate_pages, c->unique_pages);
    fprintf(
        out,
        "%s\"same_filled_check\": {\"words_per_page\": %zu, \"forward_comparisons\": %" PRIu64
        ", \"backward_comparisons\": %" PRIu64 ", \"precheck_comparisons\": %" PRIu64
        ", \"forward_average\": %.4f, \"backward_average\": %.4f, \"precheck_average\": %.4f},\n",
        indent, options->page_size / ESTIMATE_WORD, c->scan_forward, c->scan_backward,
        c->scan_precheck, average(c->scan_forward, c->pages), average(c->scan_backward, c->pages),
        average(c->scan_precheck, c->pages));
    fprintf(out, "%s\"algorithms\": {", indent);
    for (unsigned a = 0; a < options->algorithm_count; a++) {
        struct estimate_projection p;
        estimate_project(c, a, &p);
        fprintf(out, "%s\n%s  ", a ? "," : "", indent);
        util_json_string(out, options->algorithms[a]);
        fprintf(out,
                ": {\"compressed_bytes\": %" PRIu64 ", \"compressed_bytes_no_dedup\": %" PRIu64
                ", \"huge_pages\": %" PRIu64 ", \"huge_pages_no_dedup\": %" PRIu64 ",\n%s    ",
                p.compressed_unique, p.compressed_all, p.huge_unique, p.huge_all, indent);
        json_model(out, "kernel_zram", p.kernel_zram, 0, false);
        json_model(out, "zram_dedup_patch", p.dedup_patch_pool, p.dedup_patch_meta, false);
        fprintf(out, "\n%s    ", indent);
        json_model(out, "uzram", p.uzram, 0, false);
        json_model(out, "uzram_dedup", p.uzram_dedup_pool, p.uzram_dedup_meta, true);
        fputc('}', out);
    }
    fprintf(out, "%s}", options->algorithm_count ? "\n  " : "");
}

void estimate_report_json(FILE *out, const struct estimate_options *options,
                          struct estimate_source *sources, size_t source_count,
                          const struct estimate_counts *total,
                          const struct estimate_bucket *buckets,
                          const struct estimate_index_info *info)
{
    fprintf(out, "{\n  \"version\": \"%s\", \"page_size\": %zu, \"threads\": %u,\n",
            uzram_version(), options->page_size, options->jobs);
    fprintf(out,
            "  \"hash\": \"xxh3-64\", \"huge_threshold\": %zu, \"dedup_entry_bytes\": %zu, "
            "\"zram_dedup_patch_entry_bytes\": %u,\n  \"algorithms\": [",
            uzram_huge_threshold(), uzram_dedup_entry_cost(), ESTIMATE_DEDUP_PATCH_ENTRY_BYTES);
    for (unsigned a = 0; a < options->algorithm_count; a++) {
        if (a)
            fputs(", ", out);
        util_json_string(out, options->algorithms[a]);
    }
    fputs("],\n  \"sources\": [", out);
    for (size_t i = 0; i < source_count; i++) {
        const struct estimate_source *s = &sources[i];
        fprintf(out, "%s\n   {\"name\": ", i ? "," : "");
        util_json_string(out, s->name);
        fprintf(out, ", \"type\": \"%s\"", kind_name(s->kind));
        if (s->kind == SOURCE_PROCESS)
            fprintf(out, ", \"pid\": %d, \"mappings\": %zu, \"mapped_bytes\": %" PRIu64, s->pid,
                    s->mapping_count, s->mapped_bytes);
        if (s->kind == SOURCE_DIRECTORY)
            fprintf(out,
                    ", \"files\": %" PRIu64 ", \"skipped\": {\"devices\": %" PRIu64
                    ", \"sockets\": %" PRIu64 ", \"links\": %" PRIu64
                    ", \"other_file_systems\": %" PRIu64 ", \"unreadable\": %" PRIu64 "}",
                    s->files, s->skipped.devices, s->skipped.sockets, s->skipped.links,
                    s->skipped.other_file_systems, s->skipped.unreadable);
        fputs(",\n", out);
        json_counts(out, options, &s->counts, "    ");
        fputs("}", out);
    }
    fputs("\n  ],\n  \"total\": {\n", out);
    json_counts(out, options, total, "    ");
    fputs("},\n  \"histogram\": [", out);
    bool first = true;
    for (unsigned b = 0; b < ESTIMATE_BUCKETS; b++) {
        const struct estimate_bucket *bucket = &buckets[b];
        if (!bucket->contents)
            continue;
        uint64_t low = b == 0 ? 1 : (1ull << (b - 1)) + 1, high = 1ull << b;
        fprintf(out,
                "%s\n    {\"refs_min\": %" PRIu64 ", \"refs_max\": %" PRIu64
                ", \"contents\": %" PRIu64 ", \"pages\": %" PRIu64 ", \"stored_bytes\": %" PRIu64
                ", \"referenced_bytes\": %" PRIu64,
                first ? "" : ",", low, high, bucket->contents, bucket->pages,
                bucket->contents * options->page_size, bucket->pages * options->page_size);
        if (options->algorithm_count)
            fprintf(out,
                    ", \"compressed_bytes\": %" PRIu64 ", \"referenced_compressed_bytes\": %" PRIu64
                    ", \"pool_bytes\": %.0f",
                    bucket->compressed_bytes, bucket->referenced_compressed_bytes,
                    bucket->pool_bytes);
        fputc('}', out);
        first = false;
    }
    fprintf(out,
            "\n  ],\n  \"index\": {\"entries\": %" PRIu64 ", \"capacity\": %" PRIu64
            ", \"memory_bytes\": %" PRIu64 "}",
            info->entries, info->capacity, info->memory_bytes);
    const struct estimate_recompression *r = &options->recompression;
    if (r->on) {
        struct estimate_projection first;
        estimate_project(total, r->primary, &first);
        double hot = r->hot_percent / 100.0;
        fputs(",\n  \"recompression\": {\"primary\": ", out);
        util_json_string(out, options->algorithms[r->primary]);
        fputs(", \"secondary\": ", out);
        util_json_string(out, options->algorithms[r->secondary]);
        fprintf(out,
                ", \"hot_percent\": %u, \"primary_only_bytes\": %.0f, "
                "\"recompressed_bytes\": %.0f",
                r->hot_percent, first.uzram_dedup_pool + first.uzram_dedup_meta,
                recompressed_memory(options, total, r->recompressed, hot));
        if (r->recompressed_dict != r->recompressed) {
            const struct estimate_algorithm *dict = &options->specs[r->secondary_dict];
            fprintf(out,
                    ", \"dictionary_trained\": %s, \"dictionary_memory\": %zu, "
                    "\"recompressed_dict_bytes\": %.0f",
                    dict->dict_trained ? "true" : "false", dict->dict_memory,
                    recompressed_memory(options, total, r->recompressed_dict, hot));
        }
        if (r->group)
            fprintf(out,
                    ", \"group\": %u, \"bundles\": %" PRIu64 ", \"bundled_pages\": %" PRIu64
                    ", \"recompressed_bundled_bytes\": %.0f",
                    r->group, total->bundles, total->bundled_pages,
                    bundled_memory(options, total, hot));
        fputc('}', out);
    }
    fputs("\n}\n", out);
}
