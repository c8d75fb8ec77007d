# Raising the 2 MiB hugepage reservation for one benchmark run and putting it back. Sourced by memif_lib.sh and
# capacity.sh, which define log and die.

readonly HUGEPAGES=/sys/kernel/mm/hugepages/hugepages-2048kB

# reserve_hugepages NEED: at least NEED free 2 MiB pages, the reservation raised if fewer are free (other processes
# hold some); restore_hugepages (call it at exit) puts the reservation back as it was.
reserve_hugepages() {
    local need=$1 free
    free=$(cat "$HUGEPAGES/free_hugepages")
    if (( free < need )); then
        HUGEPAGES_BEFORE=$(cat "$HUGEPAGES/nr_hugepages")
        echo $((HUGEPAGES_BEFORE + need - free)) >"$HUGEPAGES/nr_hugepages"
        free=$(cat "$HUGEPAGES/free_hugepages")
        log "hugepages: reservation raised from $HUGEPAGES_BEFORE to $(cat "$HUGEPAGES/nr_hugepages") for this run"
    fi
    (( free >= need )) || die "only $free hugepages free, $need needed"
}

restore_hugepages() {
    [[ -n ${HUGEPAGES_BEFORE:-} ]] || return 0
    echo "$HUGEPAGES_BEFORE" >"$HUGEPAGES/nr_hugepages" || true
    log "hugepages back to $HUGEPAGES_BEFORE reserved"
}
