#!/usr/bin/env bash
# Files for an offline GPU machine whose calls carry at most LIMIT bytes each, the working tree included
# (README.md here): pack them into chunks on the sending side, stash one chunk per call on the machine, then
# join, check and unpack them there.
#
#   bash offline-gpu/carry.sh pack OUT_DIR PATH...   sending side, in the checkout: tar PATH... (each under its
#                                                     own name) and split it into OUT_DIR/part.NNN, each small
#                                                     enough to travel beside the tree; OUT_DIR (git-ignored)
#                                                     /carry.sha256 holds the archive's sha256 and the number of
#                                                     parts
#   bash offline-gpu/carry.sh stash PART...           machine side: copy the carried parts to $STASH/parts/
#   bash offline-gpu/carry.sh unpack SHA_FILE         machine side: join the stashed parts, check them against
#                                                     SHA_FILE, unpack into $STASH and remove the parts
#
# Environment: CARRY_LIMIT_MB (what one call may carry, tree included, in MB of 10^6 bytes; default 64),
# CARRY_MARGIN_MB (left for the scripts and small files a call carries beside its part; default 1),
# STASH (where the machine keeps parts and what they unpack to; default /root/stash, which lasts while the
# machine stays up; a private folder of yours, made by `stash` and marked .specsweep-stash: another user's, one
# open to others, a symbolic link or a folder of other files is refused, as private.sh says).
set -euo pipefail
die() { echo "carry.sh: $*" >&2; exit 1; }
# shellcheck source=offline-gpu/private.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/private.sh"
stash=${STASH:-/root/stash}
cmd=${1:-}
[ "$#" -ge 1 ] && shift
case $cmd in
  pack)
    [ "$#" -ge 2 ] || die "usage: carry.sh pack OUT_DIR PATH..."
    out=$1 && shift
    for p in "$@"; do [ -e "$p" ] || die "no such file or folder to pack: $p"; done
    git rev-parse --show-toplevel >/dev/null 2>&1 || die "pack runs in the checkout that travels (no git tree here)"
    # what travels with every call: tracked files and untracked ones git does not ignore, as far as they exist
    # (a tracked file deleted from the working tree does not travel; du fails on it but still counts the rest)
    tree=$( { git ls-files -z --cached --others --exclude-standard | du --files0-from=- -cb 2>/dev/null || true; } \
      | tail -1 | cut -f1)
    [[ $tree =~ ^[0-9]+$ ]] || die "could not measure the working tree (git ls-files | du)"
    limit=$(( ${CARRY_LIMIT_MB:-64} * 1000000 )) margin=$(( ${CARRY_MARGIN_MB:-1} * 1000000 ))
    size=$(( limit - tree - margin ))
    [ "$size" -ge 1000000 ] || die "the working tree ($tree bytes) leaves less than 1 MB under CARRY_LIMIT_MB=${CARRY_LIMIT_MB:-64}"
    # checked before the folder exists, so a refused pack leaves nothing behind (the slash: as a folder)
    git check-ignore -q "$out/" || die "$out is not ignored by git: every call would carry all its parts (add it to .gitignore)"
    mkdir -p "$out"
    rm -f "$out"/part.* "$out/carry.sha256"
    # each PATH under its own name, so that it unpacks to $STASH/NAME wherever it was on this side
    members=()
    for p in "$@"; do members+=(-C "$(cd "$(dirname "$p")" && pwd)" "$(basename "$p")"); done
    tar cf "$out/carry.tar" "${members[@]}"
    split -b "$size" -d -a 3 "$out/carry.tar" "$out/part."
    n=$(find "$out" -maxdepth 1 -name 'part.*' | wc -l)
    echo "$(sha256sum "$out/carry.tar" | cut -d' ' -f1) $n" > "$out/carry.sha256"
    rm "$out/carry.tar"
    echo "$n part(s) of at most $size bytes in $out (tree $tree bytes, limit $limit): one call each, carrying" \
      "$out/part.NNN, runs 'bash offline-gpu/carry.sh stash $out/part.NNN'; the last also carries" \
      "$out/carry.sha256 and runs 'bash offline-gpu/carry.sh unpack $out/carry.sha256'"
    ;;
  stash)
    [ "$#" -ge 1 ] || die "usage: carry.sh stash PART..."
    private_dir "$stash" .specsweep-stash STASH
    mkdir -p "$stash/parts"
    for f in "$@"; do
      [ -f "$f" ] || die "no such part: $f (was it named in the call's carry?)"
      cp "$f" "$stash/parts/"
    done
    echo "$(find "$stash/parts" -maxdepth 1 -name 'part.*' | wc -l) part(s) stashed in $stash/parts"
    ;;
  unpack)
    [ "$#" -eq 1 ] || die "usage: carry.sh unpack SHA_FILE"
    [ -f "$1" ] || die "no such file: $1"
    read -r sum n < "$1" || die "$1: expected 'SHA256 PARTS'"
    [[ $sum =~ ^[0-9a-f]{64}$ && $n =~ ^[1-9][0-9]{0,5}$ ]] || die "$1: expected 'SHA256 PARTS'"
    if [ -e "$stash" ] || [ -L "$stash" ]; then private_dir "$stash" .specsweep-stash STASH; fi
    # no parts folder at all (a machine gone cold) is 0 parts, named below; find's failure would end the script
    have=0
    if [ -d "$stash/parts" ]; then have=$(find "$stash/parts" -maxdepth 1 -name 'part.*' | wc -l); fi
    if [ "$have" -ne "$n" ]; then
      missing=$(for i in $(seq 0 $((n - 1))); do p=$(printf 'part.%03d' "$i"); [ -f "$stash/parts/$p" ] || printf '%s ' "$p"; done)
      die "$have of $n parts stashed in $stash/parts; missing: ${missing:-none (extra parts there)}(the machine may have gone cold: stash them all again)"
    fi
    cat "$stash"/parts/part.* > "$stash/carry.tar"
    echo "$sum  $stash/carry.tar" | sha256sum -c --quiet - 2>/dev/null \
      || { rm -f "$stash/carry.tar"; die "the joined parts do not match $1: stash them all again"; }
    tar xf "$stash/carry.tar" -C "$stash"
    rm -rf "$stash/carry.tar" "$stash/parts"
    echo "unpacked $n part(s) into $stash"
    ;;
  *) die "usage: carry.sh pack OUT_DIR PATH... | stash PART... | unpack SHA_FILE" ;;
esac
