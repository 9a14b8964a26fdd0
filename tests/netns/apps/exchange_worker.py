"""A stdlib-only worker for ``kind: app`` tests: every rank but 0 sends ``--bytes`` bytes to
rank 0 over TCP and waits for rank 0's reply (the count it received, 8 bytes big-endian);
rank 0 accepts ``world_size - 1`` connections, counts each until EOF and replies. Exits 0
when every count is right, 1 otherwise. Runs in the Python image and on a namespace host.

    worker.py --rank R --world W --master ADDR --port P --bytes N
"""

import argparse
import socket
import sys
import threading
import time

CHUNK = 1 << 16


def serve(args):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", args.port))
    srv.listen(args.world)
    counts = []

    def one(conn):
        total = 0
        while chunk := conn.recv(CHUNK):
            total += len(chunk)
        conn.sendall(total.to_bytes(8, "big"))
        conn.close()
        counts.append(total)

    threads = []
    for _ in range(args.world - 1):
        conn, peer = srv.accept()
        print(f"rank 0: connection from {peer[0]}", flush=True)
        threads.append(threading.Thread(target=one, args=(conn,)))
        threads[-1].start()
    for t in threads:
        t.join()
    print(f"rank 0: received {counts}", flush=True)
    return all(c == args.bytes for c in counts)


def connect(args):
    deadline = time.monotonic() + 30  # rank 0 may start listening a little later
    while True:
        try:
            return socket.create_connection((args.master, args.port), timeout=60)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def send(args):
    sock = connect(args)
    block = b"\0" * CHUNK
    left = args.bytes
    while left:
        left -= sock.send(block[:min(left, CHUNK)])
    sock.shutdown(socket.SHUT_WR)
    reply = b""
    while len(reply) < 8 and (chunk := sock.recv(8 - len(reply))):
        reply += chunk
    got = int.from_bytes(reply, "big")
    print(f"rank {args.rank}: sent {args.bytes}, rank 0 received {got}", flush=True)
    return got == args.bytes


def main():
    p = argparse.ArgumentParser()
    for name in ("rank", "world", "port", "bytes"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--master", required=True)
    args = p.parse_args()
    ok = serve(args) if args.rank == 0 else send(args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
