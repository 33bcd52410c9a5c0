# shellcheck shell=bash
# Sourced by the scripts here (never run): the checks of the folders they keep state in and of what they load
# code from, as specsweep's engine folder is checked (workflow/specsweep/enginehost.py): a folder another local
# user made first, or can write, could hold a planted tree, pid or script. Each check refuses in one line
# (prefixed with the calling script's name) and exits 1, with nothing read, run or deleted there.

# private_dir DIR MARKER CULPRIT: a folder of this user's own, for state. Made (0700, with the file MARKER in it)
# when absent, or marked when empty; else it must be a real folder (not a symbolic link), owned by this user,
# writable by nobody else, and carry MARKER (a regular file of this user's), so that a folder of other files
# (a home folder, a checkout) is never taken for it. CULPRIT is the variable that chose DIR (named in errors).
private_dir() {
  local d=$1 marker=$2 culprit=$3 me owner mode
  me=$(id -u)
  if [ ! -e "$d" ] && [ ! -L "$d" ]; then
    if ! { mkdir -p -- "$(dirname -- "$d")" && (umask 077 && mkdir -- "$d"); } 2>/dev/null; then
      private_refuse "$d: cannot be created; set $culprit to a folder of yours"
    fi
  fi
  [ ! -L "$d" ] || private_refuse "$d: is a symbolic link (never followed); remove it or set $culprit"
  [ -d "$d" ] || private_refuse "$d: is not a folder; remove it or set $culprit"
  owner=$(stat -c %u -- "$d") mode=$(stat -c %a -- "$d")
  [ "$owner" = "$me" ] ||
    private_refuse "$d: belongs to uid $owner, not to you (uid $me): nothing there is used; set $culprit to a folder of yours"
  [ $((8#$mode & 8#022)) -eq 0 ] ||
    private_refuse "$d: is writable by other users (mode $mode): nothing there is used; chmod 700 it, or remove it"
  if [ ! -e "$d/$marker" ] && [ ! -L "$d/$marker" ]; then
    [ -z "$(ls -A -- "$d")" ] ||
      private_refuse "$d: holds files but not the marker $marker: not a folder of these scripts (nothing there is touched); set $culprit to an empty folder"
    (umask 077 && echo "specsweep offline-gpu state (see offline-gpu/README.md)" >"$d/$marker") ||
      private_refuse "$d: cannot write its marker $marker"
  fi
  if [ -L "$d/$marker" ] || [ ! -f "$d/$marker" ] || [ "$(stat -c %u -- "$d/$marker")" != "$me" ]; then
    private_refuse "$d: its marker $marker is not a file of yours; set $culprit"
  fi
}

# trusted_path PATH CULPRIT: a file or folder code is loaded from (sourced, or put on PYTHONPATH): not a symbolic
# link, owned by this user or root, and writable by nobody else; so is the folder it is in.
trusted_path() {
  local p=$1 culprit=$2 me q owner mode
  me=$(id -u)
  for q in "$p" "$(dirname -- "$p")"; do
    [ ! -L "$q" ] || private_refuse "$q: is a symbolic link (never followed to load code); set $culprit"
    [ -e "$q" ] || private_refuse "$q: does not exist; set $culprit"
    owner=$(stat -c %u -- "$q") mode=$(stat -c %a -- "$q")
    [ "$owner" = "$me" ] || [ "$owner" = 0 ] ||
      private_refuse "$q: belongs to uid $owner, neither you (uid $me) nor root: no code is loaded from it; set $culprit"
    # a sticky folder open to all (/tmp) may hold a folder of code: the others can write there but not replace
    # what is ours; a file's own folder must be closed (what it sources or puts on PYTHONPATH may be beside it)
    [ $((8#$mode & 8#022)) -eq 0 ] || { [ "$q" != "$p" ] && [ -d "$p" ] && [ $((8#$mode & 8#1000)) -ne 0 ]; } ||
      private_refuse "$q: is writable by other users (mode $mode): no code is loaded from it; set $culprit"
  done
}

private_refuse() {
  echo "${0##*/}: $*" >&2
  exit 1
}
