// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * glbd flowlet switching: a tc clsact ingress program (cls_bpf, direct action).
 *
 * For every IPv4/IPv6 TCP or UDP packet it keeps one entry per 5-tuple (last seen, salt) and
 * sets the packet's L4 hash to hash(5-tuple) ^ salt. A gap longer than the flowlet timeout
 * may draw a new salt, so the kernel's multipath selection (fib_multipath_hash_policy = 1,
 * which uses an L4 hash already on the packet) may put the next burst on another next hop, in
 * proportion to the group's weights. Inside a burst the hash is stable: nothing reorders.
 * A gap draws a new salt with the probability glbd writes (1 while the weights it programs
 * are changing, falling to 0 as they settle), so settled flows stay where they are and a
 * failed next hop moves only its own flows.
 * Placement "spread": a new flowlet's hash is not drawn at random but is the next point of a
 * low-discrepancy sequence kept per destination, so the flows to one destination fill the
 * hash space (and so the group's members, in proportion to their weights) evenly instead of
 * by chance. Flowlets that start with a bare TCP control segment (the ACK streams of flows
 * the other way) take a sequence of their own, so they do not split the data flows' points.
 * Every packet passes (TC_ACT_OK); what it does not touch is counted by reason.
 *
 * The counter and config layouts are read by glbd/flowlet/loader.py: keep them in step.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#ifndef FLOWLET_TABLE_SIZE
#define FLOWLET_TABLE_SIZE 65536 /* glbd pre-creates the table with the configured size */
#endif

/* per-interface counters (one slot each); glbd.flowlet.loader.COUNTERS lists them in this order */
enum counter {
	C_PACKETS,       /* TCP/UDP packets whose hash was set */
	C_FLOWLETS,      /* flowlets started: every new salt (new flows + moved + aged) */
	C_MOVED,         /* new salt on an existing entry after a gap > timeout (< aging) */
	C_KEPT,          /* a gap > timeout (< aging) that kept its salt (the move draw said no) */
	C_NEW_FLOWS,     /* no entry: one inserted */
	C_AGED,          /* an entry idle longer than the aging time: a new flow on an old entry */
	C_SKIP_NOT_IP,   /* not IPv4/IPv6: untouched */
	C_SKIP_PROTO,    /* IP but not TCP/UDP (or IPv6 extension headers): untouched */
	C_SKIP_FRAGMENT, /* IPv4 fragment: no ports in every fragment, untouched */
	C_SKIP_SHORT,    /* headers cut short: untouched */
	C_SKIP_NO_CONFIG,/* loaded but no timeout written yet: untouched */
	C_SKIP_TABLE_FULL, /* the table refused an insert: untouched (no salt to keep stable) */
	C_MAX,
};

struct counters {
	__u64 c[C_MAX];
};

struct config {
	__u64 timeout_ns;    /* gap that starts a new flowlet; 0 = not configured yet */
	__u64 aging_ns;      /* an entry idle longer than this is a new flow, not a moved one */
	__u64 move_p0;       /* chance that a gap moves the flow, in 1/2^32, at move_t0_ns */
	__u64 move_t0_ns;    /* bpf_ktime (CLOCK_MONOTONIC) when move_p0 was set */
	__u64 move_decay_ns; /* the chance falls linearly to 0 over this; 0: move_p0 for good */
	__u32 placement;     /* PLACE_RANDOM or PLACE_SPREAD */
	__u32 buckets;       /* resilient groups' bucket count (0: none); spread aims at them too */
};

enum placement {
	PLACE_RANDOM, /* a new flowlet draws a random salt */
	PLACE_SPREAD, /* a new flowlet takes its destination's next point in the hash space */
};

struct flow_key {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
	__u8 family;
	__u8 proto;
	__u16 pad;
};

struct flow_state {
	__u64 last_ns;
	__u32 salt;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FLOWLET_TABLE_SIZE);
	__type(key, struct flow_key);
	__type(value, struct flow_state);
} flows SEC(".maps");

/* one sequence per destination address and kind of flowlet: those that start with data and
 * those that start with a bare TCP control segment (the ACK stream of a flow the other way) */
struct dest_key {
	__u32 daddr[4];
	__u32 family; /* 4 or 6, | KIND_ACKS << 8 for the second sequence */
};

#define KIND_ACKS 1

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct dest_key);
	__type(value, __u32); /* the index of the destination's next point */
} dests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

/* glbd's resilient groups, each with its buckets listed member by member
 * (glbd/flowlet/placement.py), and the group of each destination prefix routed over one. A
 * point aimed at position p of a group's list lands on the member holding that bucket, so
 * points spread evenly over the list spread over the members by their bucket counts,
 * however the kernel has scattered the buckets. */
#define LAYOUT_MAX 1024

struct layout_key {
	__u32 prefixlen; /* 32 (the family word) + the prefix length */
	__u32 family;    /* 4 or 6 */
	__u32 addr[4];   /* as flow_key.daddr: IPv4 in the first word */
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct layout_key);
	__type(value, __u32); /* the group's nexthop id */
} layouts SEC(".maps");

struct layout {
	__u32 buckets;           /* the group's bucket count */
	__u16 order[LAYOUT_MAX]; /* its bucket indices, member by member (the first `buckets`) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32); /* the group's nexthop id */
	__type(value, struct layout);
} orders SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* ingress ifindex */
	__type(value, struct counters);
} stats SEC(".maps");

/* Adds 1 to counter ``which`` (a constant) of ``c`` at an immediate offset. A loader without
 * CAP_PERFMON (glbd's unit) gets a verifier that refuses a pointer plus a register whose value
 * differs between the paths reaching one instruction (Spectre v1 sanitizing), and clang makes
 * exactly that of plain increments at different offsets once it merges their paths; an
 * immediate in inline asm cannot be merged. */
#define count(c, which)                                                                     \
	do {                                                                                 \
		if (c) {                                                                     \
			__u64 t_;                                                            \
			asm volatile("%[t] = *(u64 *)(%[p] + %[off])\n\t"                    \
				     "%[t] += 1\n\t"                                          \
				     "*(u64 *)(%[p] + %[off]) = %[t]"                         \
				     : [t] "=&r"(t_)                                          \
				     : [p] "r"(c), [off] "i"((which) * 8)                     \
				     : "memory");                                             \
		}                                                                            \
	} while (0)

/* parse()'s reason, one constant per case (see count) */
static __always_inline void count_skip(struct counters *c, int why)
{
	switch (why) {
	case C_SKIP_NOT_IP:
		count(c, C_SKIP_NOT_IP);
		break;
	case C_SKIP_PROTO:
		count(c, C_SKIP_PROTO);
		break;
	case C_SKIP_FRAGMENT:
		count(c, C_SKIP_FRAGMENT);
		break;
	default:
		count(c, C_SKIP_SHORT);
		break;
	}
}

static __always_inline struct counters *counters_of(__u32 ifindex)
{
	struct counters *c = bpf_map_lookup_elem(&stats, &ifindex);

	if (!c) {
		struct counters zero = {};

		bpf_map_update_elem(&stats, &ifindex, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&stats, &ifindex);
	}
	return c;
}

/* murmur3's 32-bit finaliser over the key's words: cheap, and a salt draw makes the final
 * hash uniform anyway; the base only keeps two flows with equal salts apart */
static __always_inline __u32 mix(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = (k << 15) | (k >> 17);
	k *= 0x1b873593;
	h ^= k;
	h = (h << 13) | (h >> 19);
	return h * 5 + 0xe6546b64;
}

static __always_inline __u32 key_hash(const struct flow_key *k)
{
	__u32 h = 0x676c6264; /* "glbd" */

#pragma unroll
	for (int i = 0; i < 4; i++) {
		h = mix(h, k->saddr[i]);
		h = mix(h, k->daddr[i]);
	}
	h = mix(h, ((__u32)k->sport << 16) | k->dport);
	h = mix(h, ((__u32)k->family << 8) | k->proto);
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

static __always_inline __u32 bitrev32(__u32 x)
{
	x = ((x >> 1) & 0x55555555) | ((x & 0x55555555) << 1);
	x = ((x >> 2) & 0x33333333) | ((x & 0x33333333) << 2);
	x = ((x >> 4) & 0x0f0f0f0f) | ((x & 0x0f0f0f0f) << 4);
	x = ((x >> 8) & 0x00ff00ff) | ((x & 0x00ff00ff) << 8);
	return (x >> 16) | (x << 16);
}

/* The bucket at position b of the list of k's destination's group (b itself when glbd
 * wrote no list for it, or one for another bucket count). */
static __always_inline __u32 aim(const struct flow_key *k, __u32 n, __u32 b)
{
	struct layout_key lk = { .prefixlen = 32 + 128, .family = k->family };
	struct layout *lo;
	__u32 *group, at;

	__builtin_memcpy(lk.addr, k->daddr, sizeof(lk.addr));
	group = bpf_map_lookup_elem(&layouts, &lk);
	if (!group)
		return b;
	lo = bpf_map_lookup_elem(&orders, group);
	if (!lo || lo->buckets != n || b >= LAYOUT_MAX)
		return b;
	at = lo->order[b];
	return at < n ? at : b;
}

/* The packet hash for the next flowlet to k's destination. The kernel selects with
 * hash >> 1: a hash-threshold group compares it with weight-proportional bounds over
 * [0, 2^31), a resilient group takes bucket (hash >> 1) % buckets, and a group's buckets are
 * runs of a member's. The van der Corput point x (the index bit-reversed) is aimed at both: its
 * top 31 bits, moved to the bucket x falls in. Any 2^m consecutive points hit every 1/2^m of
 * the space once, so a destination's flows spread over the members by their weights within a
 * flow or two, where a random draw leaves a member ~sqrt(n) flows off. Each destination starts
 * at a random index, so destinations with few flows each do not all begin on one member. */
static __always_inline __u32 spread_hash(const struct flow_key *k, __u32 kind,
					 const struct config *cfg)
{
	struct dest_key d = { .family = k->family | kind << 8 };
	__u32 *next, i, x, h, n = cfg->buckets;

	__builtin_memcpy(d.daddr, k->daddr, sizeof(d.daddr));
	next = bpf_map_lookup_elem(&dests, &d);
	if (!next) {
		__u32 start = bpf_get_prandom_u32();

		bpf_map_update_elem(&dests, &d, &start, BPF_NOEXIST);
		next = bpf_map_lookup_elem(&dests, &d);
		if (!next)
			return bpf_get_prandom_u32();
	}
	/* not atomic: two CPUs racing on one destination at worst share a point */
	i = *next;
	*next = i + 1;
	x = bitrev32(i);
	h = x >> 1;
	if (n) {
		__u32 b = (__u32)(((__u64)x * n) >> 32);

		b = aim(k, n, b);
		h = h - h % n + b;
		if (h > 0x7fffffff)
			h -= n;
	}
	return (h << 1) | 1;
}

/* a new flowlet's salt: the hash it gets is key_hash ^ salt */
static __always_inline __u32 new_salt(const struct flow_key *k, __u32 kind, __u32 kh,
				      const struct config *cfg)
{
	if (cfg->placement == PLACE_SPREAD)
		return kh ^ spread_hash(k, kind, cfg);
	return bpf_get_prandom_u32();
}

/* the chance (in 1/2^32) that a gap now draws a new salt */
static __always_inline __u64 move_chance(const struct config *cfg, __u64 now)
{
	__u64 decay = cfg->move_decay_ns, age, left;

	if (!decay)
		return cfg->move_p0;
	age = now > cfg->move_t0_ns ? now - cfg->move_t0_ns : 0;
	if (age >= decay)
		return 0;
	/* 16 bits of the remaining fraction: no overflow for decays up to 2^47 ns */
	left = ((decay - age) << 16) / decay;
	return (cfg->move_p0 * left) >> 16;
}

/* the 5-tuple, or a counter index saying why there is none; offsets from the network header,
 * so devices without a link-layer header (tun, wireguard) work as well. *kind is KIND_ACKS for
 * a TCP segment without data that is not a bare SYN (an ACK, a SYN-ACK, a FIN): the traffic
 * of a flow the other way, which a destination's data flows must not share a sequence with,
 * or alternating data and ACK flows would each take every other point (half the space). */
static __always_inline int parse(struct __sk_buff *skb, struct flow_key *k, __u32 *kind)
{
	__u32 l4off, l3len;
	__u8 proto, tcp[2];

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;

		if (bpf_skb_load_bytes_relative(skb, 0, &ip, sizeof(ip), BPF_HDR_START_NET) < 0)
			return C_SKIP_SHORT;
		if (ip.ihl < 5)
			return C_SKIP_SHORT;
		if (ip.frag_off & bpf_htons(0x3fff)) /* MF set or a non-zero offset */
			return C_SKIP_FRAGMENT;
		proto = ip.protocol;
		k->family = 4;
		k->saddr[0] = ip.saddr;
		k->daddr[0] = ip.daddr;
		l4off = ip.ihl * 4;
		/* 0 in a GRO packet past 64 KB (BIG TCP): that much is data */
		l3len = ip.tot_len ? bpf_ntohs(ip.tot_len) : skb->len;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes_relative(skb, 0, &ip6, sizeof(ip6), BPF_HDR_START_NET) < 0)
			return C_SKIP_SHORT;
		proto = ip6.nexthdr;
		k->family = 6;
		__builtin_memcpy(k->saddr, &ip6.saddr, 16);
		__builtin_memcpy(k->daddr, &ip6.daddr, 16);
		l4off = sizeof(ip6);
		l3len = sizeof(ip6) + bpf_ntohs(ip6.payload_len);
	} else {
		return C_SKIP_NOT_IP;
	}
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return C_SKIP_PROTO;
	k->proto = proto;
	/* the source and destination ports lead both headers */
	if (bpf_skb_load_bytes_relative(skb, l4off, &k->sport, 4, BPF_HDR_START_NET) < 0)
		return C_SKIP_SHORT;
	*kind = 0;
	if (proto == IPPROTO_TCP) {
		/* data offset (high nibble) and flags; a bare SYN is 0x02 */
		if (bpf_skb_load_bytes_relative(skb, l4off + 12, tcp, 2, BPF_HDR_START_NET) < 0)
			return C_SKIP_SHORT;
		if (l3len <= l4off + (tcp[0] >> 4) * 4 && (tcp[1] & 0x12) != 0x02)
			*kind = KIND_ACKS;
	}
	return -1;
}

SEC("tc")
int glbd_flowlet(struct __sk_buff *skb)
{
	struct counters *c = counters_of(skb->ingress_ifindex);
	struct flow_key k = {};
	struct flow_state *st;
	struct config *cfg;
	__u32 zero = 0, salt, kh, kind = 0;
	__u64 now, gap;
	int why;

	why = parse(skb, &k, &kind);
	if (why >= 0) {
		count_skip(c, why);
		return TC_ACT_OK;
	}
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || !cfg->timeout_ns) {
		count(c, C_SKIP_NO_CONFIG);
		return TC_ACT_OK;
	}
	now = bpf_ktime_get_ns();
	kh = key_hash(&k);
	st = bpf_map_lookup_elem(&flows, &k);
	if (st) {
		gap = now - st->last_ns;
		if (gap > cfg->aging_ns) {
			/* a new flow on an old entry: placed by the weights, like any new flow */
			st->salt = new_salt(&k, kind, kh, cfg);
			count(c, C_FLOWLETS);
			count(c, C_AGED);
		} else if (gap > cfg->timeout_ns) {
			/* a racing CPU may draw too; a flow arrives on one queue (one CPU) as a rule */
			if ((__u64)bpf_get_prandom_u32() < move_chance(cfg, now)) {
				st->salt = new_salt(&k, kind, kh, cfg);
				count(c, C_FLOWLETS);
				count(c, C_MOVED);
			} else {
				count(c, C_KEPT);
			}
		}
		st->last_ns = now;
		salt = st->salt;
	} else {
		struct flow_state fresh = { .last_ns = now, .salt = new_salt(&k, kind, kh, cfg) };

		if (bpf_map_update_elem(&flows, &k, &fresh, BPF_ANY) < 0) {
			count(c, C_SKIP_TABLE_FULL);
			return TC_ACT_OK;
		}
		salt = fresh.salt;
		count(c, C_FLOWLETS);
		count(c, C_NEW_FLOWS);
	}
	__u32 h = kh ^ salt;

	bpf_set_hash(skb, h ? h : 1);
	count(c, C_PACKETS);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
