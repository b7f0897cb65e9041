//! A directed acyclic graph of named nodes, as kro orders a ResourceGraphDefinition's resources and
//! SimpleSchema's custom types: Kahn's algorithm, taking among the ready nodes the one declared first
//! (then the smaller name), so that independent resources keep the order they were written in; and
//! apply waves, the layers peeled from the nodes nothing depends on. A cycle is refused with its path
//! (`graph contains a cycle: a -> b -> a`); unlike kro's, which follows Go's map order, the path found
//! is the same on every run.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

#[derive(Debug, Default)]
pub struct Dag {
    /// Each node's declaration order and the nodes it depends on.
    nodes: HashMap<String, (usize, BTreeSet<String>)>,
}

impl Dag {
    /// Adds a node; `order` breaks ties between nodes ready at once. A name given twice is refused.
    pub fn add(&mut self, id: &str, order: usize) -> Result<(), String> {
        if self.nodes.contains_key(id) {
            return Err(format!("node {id} already exists"));
        }
        self.nodes.insert(id.to_owned(), (order, BTreeSet::new()));
        Ok(())
    }

    pub fn contains(&self, id: &str) -> bool {
        self.nodes.contains_key(id)
    }

    /// Says `from` depends on each of `on`, refusing an unknown node, a node depending on itself, and a
    /// cycle (leaving the graph as it was).
    pub fn depend(&mut self, from: &str, on: &[String]) -> Result<(), String> {
        if !self.nodes.contains_key(from) {
            return Err(format!("node {from} does not exist"));
        }
        for dependency in on {
            if !self.nodes.contains_key(dependency.as_str()) {
                return Err(format!("node {dependency} does not exist"));
            }
            if dependency == from {
                return Err("self references are not allowed".into());
            }
        }
        let added: Vec<String> = {
            let deps = &mut self.nodes.get_mut(from).expect("checked above").1;
            on.iter().filter(|d| deps.insert((*d).clone())).cloned().collect()
        };
        if let Some(cycle) = self.cycle() {
            let deps = &mut self.nodes.get_mut(from).expect("checked above").1;
            for dependency in added {
                deps.remove(&dependency);
            }
            return Err(cycle_message(&cycle));
        }
        Ok(())
    }

    /// The nodes `id` depends on.
    pub fn dependencies(&self, id: &str) -> impl Iterator<Item = &str> {
        self.nodes.get(id).into_iter().flat_map(|(_, deps)| deps.iter().map(String::as_str))
    }

    /// Every node after those it depends on; among nodes ready together, the one declared first.
    pub fn order(&self) -> Result<Vec<String>, String> {
        let mut remaining: HashMap<&str, usize> = self.nodes.keys().map(|id| (id.as_str(), 0)).collect();
        let mut unlocks: HashMap<&str, Vec<&str>> = HashMap::new();
        for (id, (_, deps)) in &self.nodes {
            for dependency in deps {
                *remaining.get_mut(id.as_str()).expect("every node") += 1;
                unlocks.entry(dependency.as_str()).or_default().push(id.as_str());
            }
        }
        let mut ready: BinaryHeap<Reverse<(usize, &str)>> =
            remaining.iter().filter(|(_, n)| **n == 0).map(|(id, _)| Reverse((self.nodes[*id].0, *id))).collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(Reverse((_, id))) = ready.pop() {
            order.push(id.to_owned());
            for unlocked in unlocks.get(id).into_iter().flatten() {
                let left = remaining.get_mut(unlocked).expect("every node");
                *left -= 1;
                if *left == 0 {
                    ready.push(Reverse((self.nodes[*unlocked].0, unlocked)));
                }
            }
        }
        if order.len() == self.nodes.len() {
            return Ok(order);
        }
        Err(cycle_message(&self.cycle().unwrap_or_default()))
    }

    /// The apply waves: nodes nothing depends on form the last layer peeled first; a node's wave is the
    /// number of layers less its layer's index, so what others depend on is applied first and deleted
    /// last. A graph with no edges is all wave 1.
    pub fn waves(&self) -> HashMap<String, usize> {
        let mut dependents: HashMap<&str, usize> = self.nodes.keys().map(|id| (id.as_str(), 0)).collect();
        for (_, deps) in self.nodes.values() {
            for dependency in deps {
                *dependents.get_mut(dependency.as_str()).expect("every node") += 1;
            }
        }
        let mut layers: Vec<Vec<&str>> = Vec::new();
        let mut ready: Vec<&str> = dependents.iter().filter(|(_, n)| **n == 0).map(|(id, _)| *id).collect();
        while !ready.is_empty() {
            let mut next = Vec::new();
            for id in &ready {
                for dependency in &self.nodes[*id].1 {
                    let left = dependents.get_mut(dependency.as_str()).expect("every node");
                    *left -= 1;
                    if *left == 0 {
                        next.push(dependency.as_str());
                    }
                }
            }
            layers.push(std::mem::replace(&mut ready, next));
        }
        let count = layers.len();
        layers
            .into_iter()
            .enumerate()
            .flat_map(|(index, layer)| layer.into_iter().map(move |id| (id.to_owned(), count - index)))
            .collect()
    }

    /// A cycle's path, first node repeated at the end, searched from nodes in declaration order.
    fn cycle(&self) -> Option<Vec<String>> {
        let mut ids: Vec<(&usize, &String)> = self.nodes.iter().map(|(id, (order, _))| (order, id)).collect();
        ids.sort();
        let mut visited = BTreeSet::new();
        for (_, start) in ids {
            if visited.contains(start.as_str()) {
                continue;
            }
            let mut path = Vec::new();
            if let Some(cycle) = self.search(start, &mut visited, &mut path) {
                return Some(cycle);
            }
        }
        None
    }

    fn search<'a>(
        &'a self,
        node: &'a str,
        visited: &mut BTreeSet<&'a str>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        visited.insert(node);
        path.push(node);
        let mut deps: Vec<&String> = self.nodes[node].1.iter().collect();
        deps.sort_by_key(|d| (self.nodes[d.as_str()].0, d.as_str()));
        for dependency in deps {
            if let Some(at) = path.iter().position(|p| *p == dependency.as_str()) {
                let mut cycle: Vec<String> = path[at..].iter().map(|s| (*s).to_owned()).collect();
                cycle.push(dependency.clone());
                return Some(cycle);
            }
            if !visited.contains(dependency.as_str())
                && let Some(cycle) = self.search(dependency, visited, path)
            {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
}

fn cycle_message(cycle: &[String]) -> String {
    format!("graph contains a cycle: {}", cycle.join(" -> "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dag(nodes: &[&str]) -> Dag {
        let mut dag = Dag::default();
        for (order, id) in nodes.iter().enumerate() {
            dag.add(id, order).unwrap();
        }
        dag
    }

    fn deps(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn independent_nodes_keep_their_declaration_order() {
        let graph = dag(&["configmap", "service", "deployment", "autoscaler"]);
        assert_eq!(graph.order().unwrap(), ["configmap", "service", "deployment", "autoscaler"]);
        assert!(graph.waves().values().all(|w| *w == 1));
    }

    #[test]
    fn dependencies_come_first_and_are_applied_in_earlier_waves() {
        let mut graph = dag(&["deployment", "service", "configmap"]);
        graph.depend("deployment", &deps(&["configmap"])).unwrap();
        graph.depend("service", &deps(&["deployment"])).unwrap();
        assert_eq!(graph.order().unwrap(), ["configmap", "deployment", "service"]);
        let waves = graph.waves();
        assert_eq!((waves["configmap"], waves["deployment"], waves["service"]), (1, 2, 3));
    }

    #[test]
    fn a_cycle_is_refused_with_its_path_and_leaves_the_graph_as_it_was() {
        let mut graph = dag(&["a", "b", "c"]);
        graph.depend("a", &deps(&["b"])).unwrap();
        graph.depend("b", &deps(&["c"])).unwrap();
        assert_eq!(graph.depend("c", &deps(&["a"])).unwrap_err(), "graph contains a cycle: a -> b -> c -> a");
        assert_eq!(graph.order().unwrap(), ["c", "b", "a"]);
        assert_eq!(graph.depend("a", &deps(&["a"])).unwrap_err(), "self references are not allowed");
        assert_eq!(graph.depend("a", &deps(&["z"])).unwrap_err(), "node z does not exist");
        assert_eq!(graph.add("a", 9).unwrap_err(), "node a already exists");
    }
}
