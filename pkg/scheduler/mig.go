package scheduler

import (
	"sort"
	"sync"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// The MIG side of a GPU is a small state: which memory slices are taken, how
// many compute slices, how many instances of each profile, whether the media
// engines are held. Every state reachable from an empty GPU through the
// placement rules of pkg/gpu (MIGTable.CanPlace) is enumerated once per table,
// with, for each profile, the start slots still free and what taking each
// would cost. A placement decision then reads a table instead of re-running
// the rules: O(1) per GPU.
//
// The cost of taking a slot is its damage: how many placements of larger
// profiles it destroys. The capability of a state is
//
//	V(state) = Σ over profiles p of W(p) × |free start slots of p|
//
// with W growing by 8× per profile size class (1g, 1g double memory, 2g, 3g,
// 4g, 7g), so that no number of small placements outweighs one larger one
// (a profile has at most 7 start slots). damage = V(before) − V(after).
// Media-engine profiles (+me) carry no weight: they are rare and their slots
// are those of the 1g profile.

// migNode is one reachable MIG state of a table.
type migNode struct {
	mask    uint16 // memory slices in use
	compute uint8
	counts  [8]uint8 // instances per profile index
	media   bool
	value   int64 // capability V
	free    int   // free memory slices
	// stranded counts free memory slices that no profile can use now.
	stranded int
	// opts[p] lists the free start slots of profile index p, ascending.
	opts [][]migOpt
	// best[p] indexes the option of least damage (then lowest start): the
	// choice on this GPU whatever the strategy but first fit (opts[p][0]).
	best []int8
}

type migOpt struct {
	start  int
	next   int32 // state after taking it
	damage int64
}

// migTable is the enumerated state graph of one gpu.MIGTable.
type migTable struct {
	t       *gpu.MIGTable
	weights []int64
	index   map[uint64]int32
	nodes   []migNode
	empty   int32
	// fullCap[p] is how many instances of profile p fit on an empty GPU.
	fullCap []int
}

var (
	migTablesMu sync.Mutex
	migTables   = map[*gpu.MIGTable]*migTable{}
)

// tableFor returns the enumerated graph of t, building it on first use.
func tableFor(t *gpu.MIGTable) *migTable {
	migTablesMu.Lock()
	defer migTablesMu.Unlock()
	if mt, ok := migTables[t]; ok {
		return mt
	}
	mt := buildMIGTable(t)
	migTables[t] = mt
	return mt
}

func migKey(mask uint16, compute uint8, counts [8]uint8, media bool) uint64 {
	k := uint64(mask) | uint64(compute)<<16
	if media {
		k |= 1 << 24
	}
	for i, c := range counts {
		k |= uint64(c&0xf) << (28 + 4*i)
	}
	return k
}

func profileWeights(t *gpu.MIGTable) []int64 {
	type class struct{ size, compute int }
	var classes []class
	seen := map[class]bool{}
	for _, p := range t.Profiles {
		c := class{p.Size, p.Compute}
		if p.Media == "" && !seen[c] {
			seen[c] = true
			classes = append(classes, c)
		}
	}
	sort.Slice(classes, func(i, j int) bool {
		if classes[i].size != classes[j].size {
			return classes[i].size < classes[j].size
		}
		return classes[i].compute < classes[j].compute
	})
	w := make([]int64, len(t.Profiles))
	for i, p := range t.Profiles {
		if p.Media != "" {
			continue
		}
		for r, c := range classes {
			if c == (class{p.Size, p.Compute}) {
				w[i] = int64(1) << (3 * r)
			}
		}
	}
	return w
}

func buildMIGTable(t *gpu.MIGTable) *migTable {
	mt := &migTable{t: t, weights: profileWeights(t), index: map[uint64]int32{}}
	mt.fullCap = make([]int, len(t.Profiles))
	// Breadth-first from the empty GPU; a state is reached by placing
	// instances one at a time, each checked with the real rules.
	type pending struct {
		inst []gpu.Instance
	}
	add := func(inst []gpu.Instance) (int32, bool) {
		var mask uint16
		var compute uint8
		var counts [8]uint8
		media := false
		for _, in := range inst {
			for s := in.Start; s < in.End(); s++ {
				mask |= 1 << s
			}
			compute += uint8(in.Profile.Compute)
			for i, p := range t.Profiles {
				if p.ID == in.Profile.ID {
					counts[i]++
				}
			}
			if in.Profile.Media != "" {
				media = true
			}
		}
		k := migKey(mask, compute, counts, media)
		if i, ok := mt.index[k]; ok {
			return i, false
		}
		i := int32(len(mt.nodes))
		mt.index[k] = i
		mt.nodes = append(mt.nodes, migNode{mask: mask, compute: compute, counts: counts, media: media})
		return i, true
	}
	first, _ := add(nil)
	mt.empty = first
	queue := []pending{{}}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		ci := mt.index[keyOfInstances(t, cur.inst)]
		opts := make([][]migOpt, len(t.Profiles))
		for pi, p := range t.Profiles {
			for _, s := range t.FreeStarts(cur.inst, p) {
				next := append(append([]gpu.Instance(nil), cur.inst...), gpu.Instance{Profile: p, Start: s})
				ni, fresh := add(next)
				if fresh {
					queue = append(queue, pending{inst: next})
				}
				opts[pi] = append(opts[pi], migOpt{start: s, next: ni})
			}
		}
		mt.nodes[ci].opts = opts
	}
	for i := range mt.nodes {
		n := &mt.nodes[i]
		var covered uint16
		for pi, os := range n.opts {
			n.value += mt.weights[pi] * int64(len(os))
			for _, o := range os {
				for s := o.start; s < o.start+t.Profiles[pi].Size; s++ {
					covered |= 1 << s
				}
			}
		}
		for s := 0; s < t.Slices; s++ {
			if n.mask&(1<<s) == 0 {
				n.free++
				if covered&(1<<s) == 0 {
					n.stranded++
				}
			}
		}
	}
	for i := range mt.nodes {
		n := &mt.nodes[i]
		for pi := range n.opts {
			for j := range n.opts[pi] {
				o := &n.opts[pi][j]
				o.damage = n.value - mt.nodes[o.next].value
			}
		}
	}
	for i := range mt.nodes {
		n := &mt.nodes[i]
		n.best = make([]int8, len(n.opts))
		for pi, os := range n.opts {
			b := -1
			for j, o := range os {
				if b < 0 || o.damage < os[b].damage {
					b = j
				}
			}
			n.best[pi] = int8(b)
		}
	}
	for pi := range t.Profiles {
		// Greedy first fit of one profile alone gives its most instances.
		var inst []gpu.Instance
		for {
			fs := t.FreeStarts(inst, t.Profiles[pi])
			if len(fs) == 0 {
				break
			}
			inst = append(inst, gpu.Instance{Profile: t.Profiles[pi], Start: fs[0]})
		}
		mt.fullCap[pi] = len(inst)
	}
	return mt
}

func keyOfInstances(t *gpu.MIGTable, inst []gpu.Instance) uint64 {
	var mask uint16
	var compute uint8
	var counts [8]uint8
	media := false
	for _, in := range inst {
		for s := in.Start; s < in.End(); s++ {
			mask |= 1 << s
		}
		compute += uint8(in.Profile.Compute)
		for i, p := range t.Profiles {
			if p.ID == in.Profile.ID {
				counts[i]++
			}
		}
		if in.Profile.Media != "" {
			media = true
		}
	}
	return migKey(mask, compute, counts, media)
}

// profileIndex finds a profile of the table by name.
func (mt *migTable) profileIndex(name string) int {
	for i, p := range mt.t.Profiles {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// stateOf returns the node of a set of instances; ok is false when the set
// breaks the placement rules (it was not reachable).
func (mt *migTable) stateOf(inst []gpu.Instance) (int32, bool) {
	i, ok := mt.index[keyOfInstances(mt.t, inst)]
	return i, ok
}
