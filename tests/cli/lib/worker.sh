#!/bin/sh
# An overlap detector: while it runs, a file in.<pid> marks it in DIR. It counts the marks after
# making its own, so of two that overlap at all the later one sees both. It logs its fence and
# that count, one line per start (short appends to one file do not interleave).
dir=$1
touch "$dir/in.$$"
n=$(ls "$dir" | grep -c '^in\.')
echo "$KEEL_LOCK_FENCE $n" >> "$dir/log"
sleep "$2"
rm -f "$dir/in.$$"
