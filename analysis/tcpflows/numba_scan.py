"""Compiled (numba) twin of the reference flow analysis, for classic pcap files.

It runs the same per-segment rules as :mod:`analysis.tcpflows.connection` (Wireshark's
``tcp_analyze_sequence_number``; read that module's docstring for each rule and its source),
the same sequence unwrapping and RTT/FCT bookkeeping as :mod:`analysis.tcpflows.direction`
and the same keying and port-reuse rule as :mod:`analysis.tcpflows.table`, on state held in
arrays: one row per direction (``DI`` int64, ``DF`` float64, ``PE``/``PT`` the queue of unacked
segments) and one per flow (``CI``, ``CF``); direction rows of flow ``c`` are ``2c`` (side a) and
``2c + 1``. A test runs both paths on every capture and requires identical records.

Helpers are inlined into :func:`run` (``inline="always"``): as separate calls, numba
reference-counts each array argument per call, which cost more than the analysis itself.
"""

from __future__ import annotations

from numba import njit
from numpy import int64 as i64

# numba's on-disk cache (cache=True) of the functions here does not notice a change of
# compiled_decode.decode, which they inline: edit this file too when decode changes
# (last: the IP ECN field, d[19])
from analysis.pcap.compiled_decode import decode
from analysis.tcpflows.direction import DUP_SEGMENTS, DUP_WINDOW_S, MAX_HOLES, MAX_PENDING

(REF, HAS_REF, NXT, HAS_NXT, LASTACK, HAS_LASTACK, WINDOW, DUPACKNUM, LAST_FLAGS, ISN, HAS_ISN,
 DATA_END, HAS_DATA_END, MAX_ACK, HAS_MAX_ACK, KARN_BELOW, P_HEAD, P_LEN, PACKETS, PAYLOAD,
 DATA_PKTS, RETX, FAST, RTO, SPUR, OOO, DUPACKS, ZEROWIN, SACK_PKTS, RETX_BYTES, D_SYN, D_RST,
 RTT_N, MSS, WSCALE, SACK_OK, TS_OK, HAS_DATA_ACKED_T, HAS_FIN_T, HAS_FIRST_DATA_T,
 HAS_RTT, DUPS, RING_HEAD, RING_N) = range(44)
# the last DUP_SEGMENTS segments' identities (Direction.is_duplicate): 7 columns each from RING
RING, IDENT = 44, 7
# ECN counts, FIN retransmissions, capture gaps, then the open holes (Direction.holes): their
# number and MAX_HOLES (start, end) pairs from HOLES
(ECT0, ECT1, CE, ECE_N, CWR_N, FIN_RETX, GAPS, HOLE_N) = range(RING + IDENT * DUP_SEGMENTS,
                                                             RING + IDENT * DUP_SEGMENTS + 8)
HOLES = HOLE_N + 1
NDI = HOLES + 2 * MAX_HOLES
NXT_T, LASTACK_T, DATA_ACKED_T, FIN_T, FIRST_DATA_T, LAST_DATA_T, RTT_SUM, RTT_MIN, RTT_MAX = \
    range(9)
RING_T = 9  # their times
NDF = RING_T + DUP_SEGMENTS
# st: flows, packets, have_t0, sec0, frac0, then the clock checks of files.ClockChecks
(ST_BAD_FRAC, ST_BAD_FRAC_FIRST, ST_BACKWARDS, ST_BACKWARDS_FIRST, ST_LAST_SEC,
 ST_LAST_FRAC) = range(5, 11)
NST = 11
(C_PROTO, C_V6, C_SHI, C_SLO, C_DHI, C_DLO, C_SPORT, C_DPORT, C_CLOSING, C_HAS_SYN_T,
 C_HAS_MRU, C_HAS_FIRST_RTT, C_WIRE) = range(13)
NCI = 13
C_FIRST_T, C_LAST_T, C_SYN_T, C_MRU_T, C_FIRST_RTT = range(5)
NCF = 5
FIN, SYN, RST, ACK, ECE, CWR = 1, 2, 4, 16, 64, 128
M32, HALF = 0xFFFFFFFF, 0x80000000
FAST_RTX_WINDOW_S, OOO_DEFAULT_S = 0.020, 0.003
NEED_DATA, NEED_ROOM, CORRUPT = 0, 1, 2


@njit(cache=True)
def run(b, pos, hdr, st, HK, HV, DI, DF, CI, CF, PE, PT, stats):
    """Analyse the whole records of ``b`` (uint8 array) from ``pos``.

    ``hdr`` = (big_endian, nano, linktype, max caplen); ``st`` = (flows, packets, have_t0,
    sec0, frac0, then the ST_* clock checks). Returns ``(status, pos)``: NEED_DATA (pos =
    first partial record), NEED_ROOM (grow the flow arrays, resume at pos) or CORRUPT
    (impossible caplen at pos).
    """
    big, nano, link, limit = hdr[0], hdr[1], hdr[2], hdr[3]
    scale = 1e-9 if nano else 1e-6
    frac_limit = 1000000000 if nano else 1000000
    cap = CI.shape[0]
    blen = b.shape[0]
    while pos + 16 <= blen:
        sec, frac = _u32(b, pos, big), _u32(b, pos + 4, big)
        caplen, wirelen = _u32(b, pos + 8, big), _u32(b, pos + 12, big)
        if caplen > limit:
            return CORRUPT, pos
        nxt = pos + 16 + caplen
        if nxt > blen:
            return NEED_DATA, pos
        if st[0] + 1 > cap:
            return NEED_ROOM, pos
        if frac >= frac_limit:
            if st[ST_BAD_FRAC] == 0:
                st[ST_BAD_FRAC_FIRST] = st[1] + 1
            st[ST_BAD_FRAC] += 1
        if st[2] == 0:
            st[2], st[3], st[4] = 1, sec, frac
        else:
            backwards(st, sec * frac_limit + frac < st[ST_LAST_SEC] * frac_limit + st[ST_LAST_FRAC])
        st[ST_LAST_SEC], st[ST_LAST_FRAC] = sec, frac
        t = (sec - st[3]) + (frac - st[4]) * scale
        packet(b, pos + 16, caplen, wirelen, link, t, st, HK, HV, DI, DF, CI, CF, PE, PT, stats)
        pos = nxt
    return NEED_DATA, pos


@njit(cache=True, inline="always")
def backwards(st, earlier):
    """Count a frame stamped ``earlier`` than the one before it (files.ClockChecks)."""
    if earlier:
        if st[ST_BACKWARDS] == 0:
            st[ST_BACKWARDS_FIRST] = st[1] + 1
        st[ST_BACKWARDS] += 1


@njit(cache=True, inline="always")
def packet(b, off, caplen, wirelen, link, t, st, HK, HV, DI, DF, CI, CF, PE, PT, stats):
    """Decode one frame at ``b[off:off+caplen]`` seen at ``t`` s and account it."""
    st[1] += 1
    d = decode(b, off, caplen, wirelen, link)
    if d[0] < 0:
        stats[-d[0] - 1] += 1
        return
    stats[5] += d[18]
    if d[0] == 6:
        _tcp(b, t, d, wirelen, st, HK, HV, DI, DF, CI, CF, PE, PT)
    else:
        _udp(t, d, st, HK, HV, DI, DF, CI, CF)


@njit(cache=True, inline="always")
def _u32(b, i, big):
    if big:
        return (i64(b[i]) << 24) | (i64(b[i + 1]) << 16) | (i64(b[i + 2]) << 8) | i64(b[i + 3])
    return (i64(b[i + 3]) << 24) | (i64(b[i + 2]) << 16) | (i64(b[i + 1]) << 8) | i64(b[i])


@njit(cache=True, inline="always")
def _open(key, rkey, t, st, HK, HV, DI, DF, CI, CF, d):
    c = st[0]
    st[0] += 1
    _put(HK, HV, key, 2 * c)
    _put(HK, HV, rkey, 2 * c + 1)
    CI[c, :] = 0
    CF[c, :] = 0.0
    CI[c, C_PROTO], CI[c, C_V6] = d[0], d[1]
    CI[c, C_SHI], CI[c, C_SLO], CI[c, C_DHI], CI[c, C_DLO] = d[2], d[3], d[4], d[5]
    CI[c, C_SPORT], CI[c, C_DPORT] = d[6], d[7]
    CF[c, C_FIRST_T] = CF[c, C_LAST_T] = t
    for row in (2 * c, 2 * c + 1):
        DI[row, :] = 0
        DF[row, :] = 0.0
        DI[row, MSS] = DI[row, WSCALE] = DI[row, KARN_BELOW] = -1
    return 2 * c


@njit(cache=True, inline="always")
def _udp(t, d, st, HK, HV, DI, DF, CI, CF):
    key = (17, d[1], d[2], d[3], d[4], d[5], d[6], d[7])
    v = HV[_find(HK, HV, key)]
    if v < 0:
        rkey = (17, d[1], d[4], d[5], d[2], d[3], d[7], d[6])
        v = _open(key, rkey, t, st, HK, HV, DI, DF, CI, CF, d)
    CF[v >> 1, C_LAST_T] = t
    DI[v, PACKETS] += 1
    DI[v, PAYLOAD] += d[8]


@njit(cache=True, inline="always")
def _tcp(b, t, d, wirelen, st, HK, HV, DI, DF, CI, CF, PE, PT):
    seglen, seq, ack, flags, win, hlen, l4, end = d[8], d[9], d[10], d[11], d[12], d[13], \
        d[14], d[15]
    key = (6, d[1], d[2], d[3], d[4], d[5], d[6], d[7])
    v = HV[_find(HK, HV, key)]
    if v >= 0 and (flags & (SYN | ACK)) == SYN and CI[v >> 1, C_CLOSING]:
        if DI[v, D_SYN] == 0 or DI[v, HAS_ISN] == 0 or ((DI[v, ISN] - 1 - seq) & M32) != 0:
            v = -1
    if v < 0:
        rkey = (6, d[1], d[4], d[5], d[2], d[3], d[7], d[6])
        v = _open(key, rkey, t, st, HK, HV, DI, DF, CI, CF, d)
    c, f = v >> 1, v
    r = f ^ 1
    if _duplicate(f, t, d[16], d[17], seq, ack, seglen, flags, win, DI, DF):
        return
    if hlen > 20 and ((flags & SYN) or hlen != 32 or (l4 + 22 < end and b[l4 + 22] != 8)):
        _options(b, f, l4 + 20, min(l4 + hlen, end), flags & SYN, DI)
    CI[c, C_WIRE] += wirelen
    _segment(c, f, r, t, seglen, seq, ack, flags, win, d[19], DI, DF, CI, CF, PE, PT)


@njit(cache=True, inline="always")
def _duplicate(f, t, ip_id, csum, seq, ack, seglen, flags, win, DI, DF):
    """Direction.is_duplicate on the ring of DI/DF columns from RING/RING_T."""
    if ip_id < 0 and seglen == 0:
        return False
    for k in range(DI[f, RING_N]):
        col = RING + IDENT * k
        if (DI[f, col] == ip_id and DI[f, col + 1] == csum and DI[f, col + 2] == seq
                and DI[f, col + 3] == ack and DI[f, col + 4] == seglen
                and DI[f, col + 5] == flags and DI[f, col + 6] == win
                and abs(t - DF[f, RING_T + k]) < DUP_WINDOW_S):
            DI[f, DUPS] += 1
            return True
    k = DI[f, RING_HEAD]
    col = RING + IDENT * k
    DI[f, col], DI[f, col + 1], DI[f, col + 2], DI[f, col + 3] = ip_id, csum, seq, ack
    DI[f, col + 4], DI[f, col + 5], DI[f, col + 6] = seglen, flags, win
    DF[f, RING_T + k] = t
    DI[f, RING_HEAD] = (k + 1) % DUP_SEGMENTS
    if DI[f, RING_N] < DUP_SEGMENTS:
        DI[f, RING_N] += 1
    return False


@njit(cache=True, inline="always")
def _options(b, f, pos, end, syn, DI):
    while pos < end:
        kind = b[pos]
        if kind == 0:
            return
        if kind == 1:
            pos += 1
            continue
        if pos + 1 >= end or b[pos + 1] < 2:
            return
        size = i64(b[pos + 1])
        if kind == 5:
            DI[f, SACK_PKTS] += 1
        elif syn and kind == 2 and size == 4 and pos + 4 <= end:
            DI[f, MSS] = (i64(b[pos + 2]) << 8) | i64(b[pos + 3])
        elif syn and kind == 3 and size == 3 and pos + 3 <= end:
            DI[f, WSCALE] = b[pos + 2]
        elif syn and kind == 4:
            DI[f, SACK_OK] = 1
        elif syn and kind == 8:
            DI[f, TS_OK] = 1
        pos += size


@njit(cache=True, inline="always")
def _unwrap(DI, row, raw):
    if DI[row, HAS_REF] == 0:
        DI[row, HAS_REF], DI[row, REF] = 1, raw
        return raw
    ref = DI[row, REF]
    val = ref + ((raw - ref + HALF) & M32) - HALF
    if val > ref:
        DI[row, REF] = val
    return val


@njit(cache=True, inline="always")
def _segment(c, f, r, t, seglen, seq_raw, ack_raw, flags, win, ecn, DI, DF, CI, CF, PE, PT):
    CF[c, C_LAST_T] = t
    DI[f, PACKETS] += 1
    if ecn == 2:
        DI[f, ECT0] += 1
    elif ecn == 1:
        DI[f, ECT1] += 1
    elif ecn == 3:
        DI[f, CE] += 1
    if not flags & SYN:
        if flags & ECE:
            DI[f, ECE_N] += 1
        if flags & CWR:
            DI[f, CWR_N] += 1
    seq = _unwrap(DI, f, seq_raw)
    if flags & SYN:
        DI[f, D_SYN] = 1
        DI[f, ISN], DI[f, HAS_ISN] = seq + 1, 1
        if not flags & ACK:
            CF[c, C_MRU_T], CI[c, C_HAS_MRU] = t, 1
            if CI[c, C_HAS_SYN_T] == 0:
                CF[c, C_SYN_T], CI[c, C_HAS_SYN_T] = t, 1
    elif DI[f, HAS_ISN] == 0:
        DI[f, ISN], DI[f, HAS_ISN] = seq, 1
    has_ack = (flags & ACK) != 0
    ack = 0
    if has_ack:
        ack = _unwrap(DI, r, ack_raw)
        if CI[c, C_HAS_MRU] and CI[c, C_HAS_FIRST_RTT] == 0 and not flags & SYN:
            CF[c, C_FIRST_RTT], CI[c, C_HAS_FIRST_RTT] = t - CF[c, C_MRU_T], 1
    if flags & (FIN | RST):
        CI[c, C_CLOSING] = 1
        if flags & FIN and DI[f, HAS_FIN_T] == 0:
            DF[f, FIN_T], DI[f, HAS_FIN_T] = t, 1
        if flags & RST:
            DI[f, D_RST] += 1
    zwp = _ack_side(f, r, seglen, seq, has_ack, ack, flags, win, DI)
    if seglen or flags & (SYN | FIN):
        _data_side(c, f, r, t, seglen, seq, flags, zwp, DI, DF, CF, CI, PE, PT)
    DI[f, WINDOW] = win
    DI[f, LASTACK], DI[f, HAS_LASTACK] = ack, 1 if has_ack else 0
    DF[f, LASTACK_T] = t
    if has_ack:
        _note_ack(r, ack, t, DI, DF, PE, PT)


@njit(cache=True, inline="always")
def _ack_side(f, r, seglen, seq, has_ack, ack, flags, win, DI):
    has_nxt, nxt = DI[f, HAS_NXT], DI[f, NXT]
    same_ack = (has_ack and DI[f, HAS_LASTACK] and ack == DI[f, LASTACK]) or (
        not has_ack and not DI[f, HAS_LASTACK])
    if seglen == 1 and has_nxt and seq == nxt and DI[r, WINDOW] == 0 and DI[r, PACKETS]:
        DI[f, LAST_FLAGS] = 2
        if not same_ack:
            DI[f, DUPACKNUM] = 0
        return True
    plain = not flags & (SYN | FIN | RST)
    if win == 0 and plain:
        DI[f, ZEROWIN] += 1
    keepalive = seglen <= 1 and has_nxt and seq == nxt - 1 and plain
    if (seglen == 0 and win and plain and win == DI[f, WINDOW] and has_nxt and seq == nxt
            and has_ack and same_ack and DI[r, LAST_FLAGS] != 1):
        DI[f, DUPACKNUM] += 1
        DI[f, DUPACKS] += 1
    elif not same_ack:
        DI[f, DUPACKNUM] = 0
    DI[f, LAST_FLAGS] = 1 if keepalive else 0
    return False


@njit(cache=True, inline="always")
def _data_side(c, f, r, t, seglen, seq, flags, zwp, DI, DF, CF, CI, PE, PT):
    synfin = 1 if flags & (SYN | FIN) else 0
    has_nxt, nxt, end = DI[f, HAS_NXT], DI[f, NXT], seq + seglen
    retx = False
    if not zwp and DI[f, LAST_FLAGS] != 1:
        adv = has_nxt and seq < nxt and not (seglen > 1 and nxt - 1 == seq)
        first_rtt = CF[c, C_FIRST_RTT] if CI[c, C_HAS_FIRST_RTT] else 0.0
        if seglen and DI[r, HAS_LASTACK] and end <= DI[r, LASTACK]:
            DI[f, SPUR] += 1
            retx = True
        elif (adv and DI[r, DUPACKNUM] >= 2 and DI[r, HAS_LASTACK] and DI[r, LASTACK] == seq
              and 0 <= t - DF[r, LASTACK_T] < FAST_RTX_WINDOW_S):
            DI[f, FAST] += 1
            retx = True
        elif (adv and 0 <= t - DF[f, NXT_T] < (first_rtt or OOO_DEFAULT_S)
              and nxt != end + synfin):
            DI[f, OOO] += 1
        elif adv and flags & FIN and seglen == 0:
            DI[f, FIN_RETX] += 1
            retx = True
        elif adv:
            DI[f, RTO] += 1
            retx = True
    if retx:
        DI[f, RETX] += 1
        DI[f, RETX_BYTES] += seglen
    if has_nxt and seq > nxt and not flags & RST:
        DI[f, GAPS] += 1
        n = DI[f, HOLE_N]
        if n < MAX_HOLES:
            DI[f, HOLES + 2 * n], DI[f, HOLES + 2 * n + 1] = nxt, seq
            DI[f, HOLE_N] = n + 1
    elif seglen and has_nxt and seq < nxt and DI[f, HOLE_N]:
        _fill(f, seq, end, DI)
    if seglen:
        DI[f, DATA_PKTS] += 1
        DI[f, PAYLOAD] += seglen
        _note_data(f, seq, end, t, retx, DI, DF, PE, PT)
    if (not has_nxt or end + synfin > nxt) and not zwp:
        DI[f, NXT], DI[f, HAS_NXT], DF[f, NXT_T] = end + synfin, 1, t


@njit(cache=True, inline="always")
def _fill(f, seq, end, DI):
    """Direction.fill on the hole pairs of row ``f``: keep what ``[seq, end)`` leaves of each
    hole, in order; a split hole keeps its first part when no room is left."""
    n, out = DI[f, HOLE_N], 0
    a_s = DI[f, HOLES:HOLES + 2 * n:2].copy()
    b_s = DI[f, HOLES + 1:HOLES + 2 * n:2].copy()
    for i in range(n):
        a, b = a_s[i], b_s[i]
        if end <= a or seq >= b:
            if out < MAX_HOLES:
                DI[f, HOLES + 2 * out], DI[f, HOLES + 2 * out + 1] = a, b
                out += 1
            continue
        if a < seq and out < MAX_HOLES:
            DI[f, HOLES + 2 * out], DI[f, HOLES + 2 * out + 1] = a, seq
            out += 1
        if end < b and out < MAX_HOLES:
            DI[f, HOLES + 2 * out], DI[f, HOLES + 2 * out + 1] = end, b
            out += 1
    DI[f, HOLE_N] = out


@njit(cache=True, inline="always")
def _note_data(f, seq, end, t, retx, DI, DF, PE, PT):
    if DI[f, HAS_FIRST_DATA_T] == 0:
        DF[f, FIRST_DATA_T], DI[f, HAS_FIRST_DATA_T] = t, 1
    DF[f, LAST_DATA_T] = t
    if DI[f, HAS_DATA_END] == 0 or end > DI[f, DATA_END]:
        DI[f, DATA_END], DI[f, HAS_DATA_END] = end, 1
        DI[f, HAS_DATA_ACKED_T] = 0
    if retx:
        if end > DI[f, KARN_BELOW]:
            DI[f, KARN_BELOW] = end
    elif DI[f, P_LEN] < MAX_PENDING:
        slot = (DI[f, P_HEAD] + DI[f, P_LEN]) % MAX_PENDING
        PE[f, slot], PT[f, slot] = end, t
        DI[f, P_LEN] += 1


@njit(cache=True, inline="always")
def _note_ack(d, ack, t, DI, DF, PE, PT):
    if DI[d, HAS_MAX_ACK] and ack <= DI[d, MAX_ACK]:
        return
    DI[d, MAX_ACK], DI[d, HAS_MAX_ACK] = ack, 1
    if DI[d, HAS_DATA_END] and DI[d, HAS_DATA_ACKED_T] == 0 and ack >= DI[d, DATA_END]:
        DF[d, DATA_ACKED_T], DI[d, HAS_DATA_ACKED_T] = t, 1
    while DI[d, P_LEN] and PE[d, DI[d, P_HEAD]] <= ack:
        h = DI[d, P_HEAD]
        end, sent = PE[d, h], PT[d, h]
        DI[d, P_HEAD], DI[d, P_LEN] = (h + 1) % MAX_PENDING, DI[d, P_LEN] - 1
        if end == ack and end > DI[d, KARN_BELOW]:
            rtt = t - sent
            DI[d, RTT_N] += 1
            DF[d, RTT_SUM] += rtt
            if DI[d, HAS_RTT] == 0 or rtt < DF[d, RTT_MIN]:
                DF[d, RTT_MIN] = rtt
            if DI[d, HAS_RTT] == 0 or rtt > DF[d, RTT_MAX]:
                DF[d, RTT_MAX] = rtt
            DI[d, HAS_RTT] = 1


@njit(cache=True, inline="always")
def _find(HK, HV, key):
    """Slot of ``key`` in the open-addressing flow table, or the empty slot where it goes.

    The table (keys ``HK``, values ``HV``, -1 = empty) has a power-of-two size at least four
    times the flows it can hold, so probing stays short (load <= 1/2)."""
    mask = HV.shape[0] - 1
    h = i64(-3750763034362895579)  # FNV-1a offset basis; the multiplier is FNV's 64-bit prime
    for x in key:
        h = (h ^ x) * i64(1099511628211)
    i = (h ^ (h >> 29)) & mask
    while HV[i] >= 0:
        same = True
        for j in range(8):
            if HK[i, j] != key[j]:
                same = False
                break
        if same:
            return i
        i = (i + 1) & mask
    return i


@njit(cache=True, inline="always")
def _put(HK, HV, key, value):
    i = _find(HK, HV, key)
    for j in range(8):
        HK[i, j] = key[j]
    HV[i] = value


@njit(cache=True)
def rehash(HK, HV, NK, NV):
    """Move every entry of the table (HK, HV) into the larger empty table (NK, NV)."""
    for i in range(HV.shape[0]):
        if HV[i] >= 0:
            key = (HK[i, 0], HK[i, 1], HK[i, 2], HK[i, 3], HK[i, 4], HK[i, 5], HK[i, 6],
                   HK[i, 7])
            _put(NK, NV, key, HV[i])
