#!/bin/sh
# bench/new_pages.c's methods (METHODS) alternated, ROUNDS rounds of 256 MiB, on files kept until the
# end (each trial's pages are memory no earlier trial freed, as a broker writing new CommitLog files
# meets); UNLINK=1: each file removed after its trial (the next one gets the memory just freed).
#     gcc -O2 -o <tree>/new_pages bench/new_pages.c && flock <bench lock> bench/new_pages.sh <tree>/new_pages DIR
NP=$1; D=$2/new-pages-$$; mkdir -p "$D"
[ -n "$UNLINK" ] || export KEEP=1
echo "start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for m in ${METHODS:-populate_read populate_write map_populate pwrite_zeros write_fault records_fault records_popw records_pwrite records_old}; do
    "$NP" "$D" $m 256
  done
  "$NP" "$D" populate_read 256 2048
  "$NP" "$D" populate_write 256 2048
done
echo "end $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
rm -rf "$D"
