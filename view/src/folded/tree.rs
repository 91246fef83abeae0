//! The tree of distinct stacks every flame view builds: one node per
//! distinct path (with its origin), its names interned.

use super::Origin;
use fgtrace_trace::SiteInfo;
use std::collections::HashMap;

/// The parent of a root node.
pub(crate) const NONE: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) parent: u32,
    pub(crate) name: u32,
    pub(crate) origin: Origin,
    /// Sampled/marker nodes under a traced call: that call's node, whose self
    /// time they share. `NONE` for samples outside any traced call.
    pub(super) anchor: u32,
    pub(crate) calls: u64,
    pub(crate) total_ns: u64,
    pub(crate) self_ns: u64,
    /// Samples whose stack ends here.
    pub(crate) own_samples: u64,
    /// Samples in this subtree (filled by `finish`).
    pub(crate) samples: u64,
    /// Count of the folded line ending here.
    pub(crate) weight: u64,
    /// Weight of this subtree: the frame's width (filled by `finish`).
    pub(crate) width: u64,
}

/// Interned names and the tree of distinct stacks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tree {
    pub(crate) nodes: Vec<Node>,
    index: rustc_hash::FxHashMap<(u32, u32, Origin), u32>,
    pub(crate) names: Vec<String>,
    name_ids: HashMap<String, u32>,
}

impl Tree {
    /// Folded lines split frames at `;` and end at the last space before the
    /// count; a `;` or line break inside a name would move frames, so they
    /// become `,` and a space.
    pub(crate) fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.name_ids.get(s) {
            return id;
        }
        let clean: String = s
            .chars()
            .map(|c| match c {
                ';' => ',',
                '\n' | '\r' => ' ',
                c => c,
            })
            .collect();
        let id = self.names.len() as u32;
        self.names.push(clean);
        self.name_ids.insert(s.to_string(), id);
        id
    }

    /// The interned name of `site` (short or full; `[site N]` past the
    /// table), `ids` caching the ids of the sites so far.
    pub(crate) fn site_name(
        &mut self,
        ids: &mut Vec<u32>,
        sites: &[SiteInfo],
        short: bool,
        site: u32,
    ) -> u32 {
        while ids.len() <= site as usize {
            let i = ids.len();
            let name = match sites.get(i) {
                Some(s) if short => s.name.clone(),
                Some(s) => s.full_name(),
                None => format!("[site {i}]"),
            };
            ids.push(self.intern(&name));
        }
        ids[site as usize]
    }

    pub(crate) fn child(&mut self, parent: u32, name: u32, origin: Origin) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.index.entry((parent, name, origin)).or_insert(next);
        if id == next {
            self.nodes.push(Node {
                parent,
                name,
                origin,
                anchor: NONE,
                calls: 0,
                total_ns: 0,
                self_ns: 0,
                own_samples: 0,
                samples: 0,
                weight: 0,
                width: 0,
            });
        }
        id
    }

    /// Node ids from the root to `node`.
    pub(crate) fn path(&self, mut node: u32) -> Vec<u32> {
        let mut p = Vec::new();
        while node != NONE {
            p.push(node);
            node = self.nodes[node as usize].parent;
        }
        p.reverse();
        p
    }

    pub(crate) fn name(&self, node: u32) -> &str {
        &self.names[self.nodes[node as usize].name as usize]
    }

    pub(crate) fn line(&self, node: u32) -> String {
        let mut s = String::new();
        for (i, n) in self.path(node).into_iter().enumerate() {
            if i > 0 {
                s.push(';');
            }
            s.push_str(self.name(n));
        }
        s
    }

    /// Subtree sums: children are always created after their parent, so one
    /// backward pass adds every node into its parent.
    pub(super) fn sum_up(&mut self) {
        for n in &mut self.nodes {
            n.width = n.weight;
            n.samples = n.own_samples;
        }
        for i in (0..self.nodes.len()).rev() {
            let (p, w, s) = {
                let n = &self.nodes[i];
                (n.parent, n.width, n.samples)
            };
            if p != NONE {
                let parent = &mut self.nodes[p as usize];
                parent.width += w;
                parent.samples += s;
            }
        }
    }
}
