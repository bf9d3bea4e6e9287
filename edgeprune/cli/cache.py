"""`edgeprune cache`: what edgeprune keeps in its cache folder, checked or cleared (`edgeprune.cache`)."""

import json
import sys

import click

from edgeprune.cli.common import EXIT_OK, epilog, output_options

EXIT_DAMAGED = 1


def megabytes(size_bytes: int) -> str:
    return f"{size_bytes / 1e6:.1f} MB"


@click.command("cache", epilog=epilog(["edgeprune cache", "edgeprune cache --verify", "edgeprune cache --clear"],
                                      "0 listed, every entry whole (--verify), or cleared; 1 --verify found "
                                      "damaged entries (named on stderr, removed: they are rebuilt when next "
                                      "needed); 2 bad input"))
@click.option("--verify", is_flag=True, help="check every entry against its record (size, sha256) and remove "
              "those that do not match")
@click.option("--clear", is_flag=True, help="remove the exports, teachers, head scores and wheels (the emulated "
              "board's root stays)")
@click.option("--json", "as_json", is_flag=True, help="print the entries (or what was removed) as JSON")
@output_options
def cache_command(verify: bool, clear: bool, as_json: bool) -> int:
    """The teachers, head scores, exports and wheels edgeprune keeps in its cache folder ($EDGEPRUNE_CACHE), with
    their sizes.

    Entries are written whole with a record of their size and sha256; one that no longer matches is rebuilt
    when next needed, with one warning."""
    from edgeprune.cache import cache_root, clear_cache, list_entries, verify_cache

    root = cache_root()
    if verify and clear:
        raise click.UsageError("pass --verify or --clear, not both")
    if clear:
        freed = clear_cache(root)
        left = [str(entry.path) for entry in list_entries(root)]
        print(json.dumps({"cleared": str(root), "freed_bytes": freed, "left": left}) if as_json else
              f"cleared {root}: {megabytes(freed)} freed" + (f"; left as they are: {', '.join(left)}" if left else ""))
        return EXIT_OK
    if verify:
        removed = verify_cache(root)
        for path, problem in removed:
            sys.stderr.write(f"edgeprune: damaged cache entry {path}: removed ({problem})\n")
        entries = list_entries(root)
        if as_json:
            print(json.dumps({"removed": [{"path": str(path), "problem": problem} for path, problem in removed],
                              "whole": [entry.to_dict() for entry in entries if entry.recorded]}, indent=2))
        else:
            print(f"{sum(entry.recorded for entry in entries)} entries whole, {len(removed)} removed in {root}")
        return EXIT_DAMAGED if removed else EXIT_OK
    entries = list_entries(root)
    if as_json:
        print(json.dumps([entry.to_dict() for entry in entries], indent=2))
        return EXIT_OK
    for entry in entries:
        note = "" if entry.recorded else ("\t(a folder)" if entry.path.is_dir() else "\t(no record)")
        print(f"{megabytes(entry.size_bytes):>10}\t{entry.path.relative_to(root)}{note}")
    print(f"{megabytes(sum(entry.size_bytes for entry in entries)):>10}\tin all, {len(entries)} entries in {root}")
    return EXIT_OK
