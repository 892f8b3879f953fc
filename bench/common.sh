# Shared by the bench/ scripts (sourced).
# median: of the numbers on stdin, one per line.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# med "1 2 3" (or med 1 2 3): median of the numbers given.
med() { printf '%s\n' $* | median; }
# glibc malloc tuned as gantry's configure_allocator() tunes it (for the bare loop).
tuned_malloc="glibc.malloc.trim_threshold=1073741824:glibc.malloc.mmap_threshold=268435456:glibc.malloc.top_pad=67108864"
