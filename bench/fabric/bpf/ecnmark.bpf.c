// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * The fabric bench's ECN marker: a tc clsact egress program (cls_bpf, direct action) on a
 * link whose root qdisc is a tbf at a known rate. This kernel has no RED qdisc, so the marker
 * keeps the link's queue itself: a virtual FIFO that every packet joins (unless it would
 * overflow the real queue, which then drops it) and that drains at the link rate, less the
 * tbf's burst, which leaves without queueing. An ECN-capable packet (ECT(0)/ECT(1)) that joins
 * a queue holding at least MIN_BYTES is marked CE with a probability rising linearly to 1 at
 * MAX_BYTES, on the instantaneous queue at enqueue, as a switch's WRED/ECN profile does
 * (Juniper's AI-fabric JVD: 55 % to 90 % of a shallow buffer). Other packets pass untouched.
 * Every packet goes on to the next filter (TC_ACT_UNSPEC): glbd's own egress program (the
 * foreign-load counter) must still see it.
 *
 * The link's figures are compile-time constants (bench/fabric/ecn.py builds one object per
 * setting); each tc load has its own maps, so each interface has its own queue.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#ifndef RATE_BPS
#define RATE_BPS 10000000ULL /* the tbf's rate, bit/s */
#endif
#ifndef BURST_BYTES
#define BURST_BYTES 8000ULL /* the tbf's bucket: leaves at once, never queued */
#endif
#ifndef LIMIT_BYTES
#define LIMIT_BYTES 10598ULL /* the real queue's size: a packet beyond it is dropped there */
#endif
#ifndef MIN_BYTES
#define MIN_BYTES 5829ULL /* marking starts (probability 0) */
#endif
#ifndef MAX_BYTES
#define MAX_BYTES 9538ULL /* every ECN-capable packet marked from here */
#endif

/* per-interface counters, in this order in bench/fabric/ecn.py */
enum counter {
	C_PACKETS, /* packets seen */
	C_ECT,     /* ECN-capable IP packets seen */
	C_MARKED,  /* set to CE */
	C_OVER,    /* would overflow the real queue (dropped there, or marked if ECN-capable) */
	C_MAX,
};

struct queue {
	struct bpf_spin_lock lock;
	__u64 bytes; /* virtual backlog, tbf burst included */
	__u64 t_ns;  /* when bytes was last drained */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct queue);
} queue SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &c);

	if (v)
		__sync_fetch_and_add(v, 1);
}

/* the backlog the packet joins (after draining to now), and whether it fits */
static __always_inline __u64 enqueue(__u64 len, int *fits)
{
	__u32 k = 0;
	struct queue *q = bpf_map_lookup_elem(&queue, &k);
	__u64 now = bpf_ktime_get_ns(), dt, drained, before;

	*fits = 1;
	if (!q)
		return 0;
	bpf_spin_lock(&q->lock);
	dt = now > q->t_ns ? now - q->t_ns : 0;
	if (dt > 10000000000ULL)
		dt = 10000000000ULL;
	drained = dt * (RATE_BPS / 8) / 1000000000ULL;
	q->bytes = q->bytes > drained ? q->bytes - drained : 0;
	q->t_ns = now;
	before = q->bytes;
	if (before + len > LIMIT_BYTES + BURST_BYTES)
		*fits = 0;
	else
		q->bytes = before + len;
	bpf_spin_unlock(&q->lock);
	return before > BURST_BYTES ? before - BURST_BYTES : 0;
}

static __always_inline int mark(__u64 backlog)
{
	if (backlog < MIN_BYTES)
		return 0;
	if (backlog >= MAX_BYTES)
		return 1;
	return (__u64)bpf_get_prandom_u32() * (MAX_BYTES - MIN_BYTES) <
	       ((__u64)(backlog - MIN_BYTES) << 32);
}

SEC("tc")
int ecnmark(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	int fits;
	__u64 backlog;

	count(C_PACKETS);
	backlog = enqueue(skb->len, &fits);
	if (!fits) {
		/* the real queue drops it, or (a tbf dequeues whole packets, so the two differ by
		 * about one) takes it into a full queue: marked either way */
		count(C_OVER);
		backlog = MAX_BYTES;
	}
	if ((void *)(eth + 1) > end)
		return TC_ACT_UNSPEC;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		__u8 tos;

		if ((void *)(ip + 1) > end)
			return TC_ACT_UNSPEC;
		tos = ip->tos;
		if (!(tos & 3))
			return TC_ACT_UNSPEC;
		count(C_ECT);
		if ((tos & 3) == 3 || !mark(backlog))
			return TC_ACT_UNSPEC;
		/* the header checksum covers tos: update it by the 16-bit word that holds it */
		__u16 old = bpf_htons((__u16)ip->version << 12 | (__u16)ip->ihl << 8 | tos);
		__u16 new = bpf_htons((__u16)ip->version << 12 | (__u16)ip->ihl << 8 | tos | 3);
		__u32 off = ETH_HLEN + __builtin_offsetof(struct iphdr, tos);
		__u8 ce = tos | 3;

		bpf_l3_csum_replace(skb, ETH_HLEN + __builtin_offsetof(struct iphdr, check), old,
				    new, 2);
		bpf_skb_store_bytes(skb, off, &ce, 1, 0);
		count(C_MARKED);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		__u8 b1;

		if ((void *)(ip6 + 1) > end)
			return TC_ACT_UNSPEC;
		/* traffic class spans the low nibble of byte 0 and the high one of byte 1;
		 * its ECN bits are bits 4-5 of byte 1 */
		b1 = ((__u8 *)ip6)[1];
		if (!(b1 & 0x30))
			return TC_ACT_UNSPEC;
		count(C_ECT);
		if ((b1 & 0x30) == 0x30 || !mark(backlog))
			return TC_ACT_UNSPEC;
		b1 |= 0x30;
		bpf_skb_store_bytes(skb, ETH_HLEN + 1, &b1, 1, 0);
		count(C_MARKED);
	}
	return TC_ACT_UNSPEC;
}

char _license[] SEC("license") = "GPL";
