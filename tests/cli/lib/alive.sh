#!/bin/sh
# Writes to FILE whether process PID still runs (a zombie does not): "alive" or "gone".
state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
case "$state" in
  ''|Z|X) echo gone > "$2" ;;
  *) echo alive > "$2" ;;
esac
