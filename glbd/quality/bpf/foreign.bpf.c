// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * glbd foreign load: a tc clsact egress program (cls_bpf, direct action) on fabric interfaces.
 *
 * It counts, per egress interface, the bytes and packets leaving it and how many of them a load
 * balancer did not steer ("foreign"), told apart by where each packet entered this router
 * (skb->ingress_ifindex): 0 (sent by this router itself) is foreign; an interface in `ports`
 * has the class written there; any other the default class in `config`.
 * Every packet passes untouched, on to the next filter if any (TC_ACT_UNSPEC: counting is not
 * classifying, so filters after this one still run).
 *
 * The map layouts are read and written by glbd/quality/foreigncount.py: keep them in step.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

/* the classes (glbd.quality.foreigncount.STEERED, FOREIGN); anything but STEERED counts as
 * foreign, so an unwritten (0) class errs towards foreign like the router's own packets */
#define CLASS_STEERED 1
#define CLASS_FOREIGN 2

struct config {
	__u32 default_class; /* of packets from an interface not in `ports` */
	__u32 pad;
};

/* skb->len (the bytes the qdisc counters count: the link-layer header included) */
struct counts {
	__u64 bytes;
	__u64 packets;
	__u64 foreign_bytes;
	__u64 foreign_packets;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);   /* ingress ifindex */
	__type(value, __u32); /* its class */
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* egress ifindex */
	__type(value, struct counts);
} counts SEC(".maps");

static __always_inline __u32 class_of(__u32 from)
{
	struct config *cfg;
	__u32 zero = 0, *cls;

	if (!from) /* generated here: no load balancer steered it */
		return CLASS_FOREIGN;
	cls = bpf_map_lookup_elem(&ports, &from);
	if (cls)
		return *cls;
	cfg = bpf_map_lookup_elem(&config, &zero);
	return cfg ? cfg->default_class : CLASS_FOREIGN;
}

SEC("tc")
int glbd_foreign(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex; /* at egress: the interface it leaves by */
	struct counts *c = bpf_map_lookup_elem(&counts, &ifindex);

	if (!c) {
		struct counts zero = {};

		/* NOEXIST: another CPU's entry for the same interface stays */
		bpf_map_update_elem(&counts, &ifindex, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&counts, &ifindex);
		if (!c) /* the map is full */
			return TC_ACT_UNSPEC;
	}
	/* a per-CPU value: plain adds, no atomics */
	c->bytes += skb->len;
	c->packets++;
	if (class_of(skb->ingress_ifindex) != CLASS_STEERED) {
		c->foreign_bytes += skb->len;
		c->foreign_packets++;
	}
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
