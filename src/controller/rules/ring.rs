//! Which member a parent belongs to: a consistent-hash ring over the live members, each placed at
//! `VNODES` points, a parent belonging to the member at the first point at or after its own. A member
//! joining or leaving moves only the parents on the arcs it gains or loses, about 1/N of them, spread
//! over every other member rather than taken from one neighbour.
//!
//! Parents are placed by their uid, hashed with 64-bit FNV-1a: the hash Kubernetes' server-side sharded
//! list and watch (KEP-5866, alpha in 1.36) filters on, `shardRange(object.metadata.uid, start, end)`. A
//! member's share is a set of arcs of that same space ([`Ring::ranges`]), so once API servers offer the
//! filter, a member can watch its own parents by range instead of by the label the coordinator writes.

use std::hash::Hasher;

use fnv::FnvHasher;

/// Points per member. Shares vary about as 1/sqrt(VNODES): with 100 (timebertt's sharder) one of 2
/// members held 58% of 20,000 parents here, with 500 within 4% of the fair share at 2 and 3 members and
/// 7% at 5. More points would mean more ranges per member for a server-side filter.
pub const VNODES: usize = 500;

/// 64-bit FNV-1a of `bytes`.
pub fn hash(bytes: &[u8]) -> u64 {
    let mut hasher = FnvHasher::default();
    hasher.write(bytes);
    hasher.finish()
}

/// Where a member's `vnode`th point is. FNV-1a alone spreads names that differ in a last digit or two
/// over a narrow band (its high bits hardly change), so the points are mixed further with
/// MurmurHash3's 64-bit finaliser. Keys stay plain FNV-1a of the uid, which random uids spread well.
fn point(member: &str, vnode: usize) -> u64 {
    let mut h = hash(format!("{member}#{vnode}").as_bytes());
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ceb9fe1a85ec53);
    h ^ (h >> 33)
}

/// The ring of a set of members.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    /// (point, member index), sorted by point.
    points: Vec<(u64, usize)>,
    members: Vec<String>,
}

impl Ring {
    /// The ring of `members` (in any order; duplicates count once).
    pub fn new<S: AsRef<str>>(members: &[S]) -> Self {
        let mut members: Vec<String> = members.iter().map(|m| m.as_ref().to_owned()).collect();
        members.sort();
        members.dedup();
        let mut points: Vec<(u64, usize)> = members
            .iter()
            .enumerate()
            .flat_map(|(index, member)| (0..VNODES).map(move |v| (point(member, v), index)))
            .collect();
        // Two points at one place (vanishingly rare): the lower member name wins, the same everywhere.
        points.sort_unstable();
        points.dedup_by_key(|(point, _)| *point);
        Ring { points, members }
    }

    pub fn members(&self) -> &[String] {
        &self.members
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The member the parent with this uid belongs to (none on an empty ring).
    pub fn owner(&self, uid: &str) -> Option<&str> {
        self.member_at(hash(uid.as_bytes()))
    }

    fn member_at(&self, key: u64) -> Option<&str> {
        let at = self.points.partition_point(|(point, _)| *point < key);
        let (_, index) = self.points.get(at).or_else(|| self.points.first())?;
        Some(&self.members[*index])
    }

    /// The hash ranges `[start, end)` whose keys belong to `member`, merged where adjacent; a range
    /// ending at 0 runs to the end of the space. What a server-side shard filter would be given.
    pub fn ranges(&self, member: &str) -> Vec<(u64, u64)> {
        let Some(index) = self.members.iter().position(|m| m == member) else { return Vec::new() };
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let n = self.points.len();
        for (i, (point, owner)) in self.points.iter().enumerate() {
            if *owner != index {
                continue;
            }
            // The arc a point owns runs from just after the previous point to the point itself.
            let start = if i == 0 { self.points[n - 1].0.wrapping_add(1) } else { self.points[i - 1].0 + 1 };
            let end = point.wrapping_add(1);
            if i == 0 && start != 0 {
                // The first point's arc wraps around the end of the space.
                ranges.push((0, end));
                ranges.push((start, 0));
                continue;
            }
            match ranges.last_mut() {
                Some((_, last_end)) if *last_end == start => *last_end = end,
                _ => ranges.push((start, end)),
            }
        }
        ranges.sort_unstable();
        ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` uids as the API server makes them (random version 4 UUIDs), from a fixed seed.
    fn uids(n: usize) -> Vec<String> {
        let mut state: u64 = 0x9e3779b97f4a7c15;
        let mut next = move || {
            // splitmix64
            state = state.wrapping_add(0x9e3779b97f4a7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
            z ^ (z >> 31)
        };
        (0..n)
            .map(|_| {
                let (a, b) = (next(), next());
                format!(
                    "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
                    a >> 32,
                    (a >> 16) & 0xffff,
                    a & 0xfff,
                    (b >> 48) & 0x3fff | 0x8000,
                    b & 0xffff_ffff_ffff
                )
            })
            .collect()
    }

    fn shares(ring: &Ring, uids: &[String]) -> std::collections::BTreeMap<String, usize> {
        let mut shares = std::collections::BTreeMap::new();
        for uid in uids {
            *shares.entry(ring.owner(uid).unwrap().to_owned()).or_insert(0) += 1;
        }
        shares
    }

    #[test]
    fn fnv1a_matches_its_published_values() {
        // From the FNV reference test vectors.
        assert_eq!(hash(b""), 0xcbf29ce484222325);
        assert_eq!(hash(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(hash(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn every_member_gets_a_fair_share() {
        let uids = uids(20_000);
        for n in [2, 3, 5, 20] {
            let members: Vec<String> = (0..n).map(|i| format!("samplectl-{i}")).collect();
            let shares = shares(&Ring::new(&members), &uids);
            assert_eq!(shares.len(), n, "every member owns some");
            let fair = uids.len() / n;
            for (member, share) in shares {
                assert!(
                    share > fair * 85 / 100 && share < fair * 115 / 100,
                    "{n} members: {member} has {share}, fair {fair}"
                );
            }
        }
    }

    #[test]
    fn a_join_or_a_leave_moves_about_one_nth_and_only_to_or_from_that_member() {
        let uids = uids(20_000);
        let four: Vec<String> = (0..4).map(|i| format!("m{i}")).collect();
        let five: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
        let (before, after) = (Ring::new(&four), Ring::new(&five));
        let moved: Vec<&String> = uids.iter().filter(|u| before.owner(u) != after.owner(u)).collect();
        assert!(moved.iter().all(|u| after.owner(u) == Some("m4")), "a join only moves parents to the new member");
        let share = moved.len() as f64 / uids.len() as f64;
        assert!((0.14..0.26).contains(&share), "a fifth member takes about 1/5: {share}");
        // The same the other way: a leave moves only the leaver's parents.
        let moved_back = uids.iter().filter(|u| after.owner(u) != before.owner(u)).count();
        assert_eq!(moved_back, moved.len());
    }

    #[test]
    fn the_order_members_are_named_in_does_not_matter() {
        let a = Ring::new(&["b", "a", "c", "a"]);
        let b = Ring::new(&["c", "b", "a"]);
        assert_eq!(a.members(), ["a", "b", "c"]);
        for uid in uids(1000) {
            assert_eq!(a.owner(&uid), b.owner(&uid));
        }
        assert_eq!(Ring::new::<&str>(&[]).owner("x"), None);
    }

    #[test]
    fn a_members_ranges_hold_exactly_the_keys_it_owns() {
        let ring = Ring::new(&["m0", "m1", "m2"]);
        let all: Vec<Vec<(u64, u64)>> = ring.members().iter().map(|m| ring.ranges(m)).collect();
        let inside = |ranges: &[(u64, u64)], key: u64| {
            ranges.iter().any(|(start, end)| key >= *start && (*end == 0 || key < *end))
        };
        // Every point and its neighbours, the ends of the space, and many uids.
        let mut keys: Vec<u64> = vec![0, 1, u64::MAX, u64::MAX - 1];
        for (point, _) in &ring.points {
            keys.extend([*point, point.wrapping_add(1), point.wrapping_sub(1)]);
        }
        keys.extend(uids(5000).iter().map(|u| hash(u.as_bytes())));
        for key in keys {
            let owner = ring.member_at(key).unwrap();
            for (member, ranges) in ring.members().iter().zip(&all) {
                assert_eq!(inside(ranges, key), member == owner, "key {key:#x}: owner {owner}, {member}'s ranges");
            }
        }
        assert!(all.iter().all(|r| r.len() < VNODES + 2), "adjacent arcs are merged");
    }
}
