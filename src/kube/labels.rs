//! An object's labels as the store keeps them beside its JSON: the string-valued entries of
//! `metadata.labels`, sorted by key, in one exactly sized allocation.
//!
//! Why not a `BTreeMap<String, String>`: every stored object carries its labels for the
//! lifetime of that version, and a B-tree allocates a whole node (eleven keys and eleven
//! values, 544 bytes) for even one label. Objects have a handful of labels, so a sorted
//! slice found by binary search costs a few dozen bytes plus the strings and answers the
//! selectors as fast (docs/performance-notes.md, "Labels as a sorted slice; one label index
//! set", and the replayed store's RSS in "A replayed store held nearly twice the memory it
//! needed").

/// Sorted, unique label keys with their values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    /// The value of label `key`, if the object has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|i| self.0[i].1.as_ref())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The labels in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Collects labels; when a key repeats, the last value wins, as it does for a map.
impl<K: Into<Box<str>>, V: Into<Box<str>>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut entries: Vec<(Box<str>, Box<str>)> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        // A stable sort keeps repeats in their given order, so the last of each run is the
        // last one given.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut unique: Vec<(Box<str>, Box<str>)> = Vec::with_capacity(entries.len());
        for entry in entries {
            match unique.last_mut() {
                Some(last) if last.0 == entry.0 => *last = entry,
                _ => unique.push(entry),
            }
        }
        Labels(unique.into_boxed_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn lookups_agree_with_a_map_of_the_same_pairs() {
        let pairs = [
            ("tier", "front"),
            ("app", "web"),
            ("example.com/role", "x"),
            ("app", "db"),
            ("", "empty-key"),
            ("zz", ""),
        ];
        let labels: Labels = pairs.iter().copied().collect();
        let map: BTreeMap<&str, &str> = pairs.iter().copied().collect();
        assert_eq!(labels.len(), map.len());
        assert!(labels.iter().eq(map.iter().map(|(k, v)| (*k, *v))));
        for key in [
            "tier",
            "app",
            "example.com/role",
            "",
            "zz",
            "missing",
            "ap",
            "tiers",
        ] {
            assert_eq!(labels.get(key), map.get(key).copied(), "{key:?}");
            assert_eq!(labels.contains_key(key), map.contains_key(key), "{key:?}");
        }
        assert_eq!(
            labels.get("app"),
            Some("db"),
            "the last value of a repeated key wins"
        );
    }

    #[test]
    fn no_labels() {
        let labels: Labels = std::iter::empty::<(String, String)>().collect();
        assert!(labels.is_empty());
        assert_eq!(labels.get("app"), None);
        assert_eq!(labels, Labels::default());
    }
}
