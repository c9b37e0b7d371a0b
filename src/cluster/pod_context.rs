//! What a pod is judged by beyond itself: the PriorityClasses its priority may come from,
//! and the Namespaces that say what their pods opted in to. Both views keep it: decisions
//! classify pods and read opt-ins, requeue decides which evictions it copies.

use super::PMap;
use crate::model::{Namespace, NamespaceOptIn, Pod, PriorityClass};

#[derive(Debug, Clone, Default)]
pub struct PodContext {
    priority_classes: PMap<String, i32>,
    /// Per namespace, what it opted in to. `None` where the source has no namespaces (a
    /// snapshot recorded without them): then every namespace takes copies (within baseline).
    namespaces: Option<PMap<String, NamespaceOptIn>>,
}

impl PodContext {
    pub fn apply_priority_class(&mut self, pc: PriorityClass) {
        self.priority_classes.insert(pc.name, pc.value);
    }

    pub fn remove_priority_class(&mut self, name: &str) -> bool {
        self.priority_classes.remove(name).is_some()
    }

    pub fn priority_class_names(&self) -> impl Iterator<Item = &str> {
        self.priority_classes.keys().map(String::as_str)
    }

    /// The value of the PriorityClass `name`, if it is known.
    pub fn priority_class(&self, name: &str) -> Option<i32> {
        self.priority_classes.get(name).copied()
    }

    /// The pod's priority: `spec.priority` as admitted, else its PriorityClass, else 0.
    pub fn priority_of(&self, pod: &Pod) -> i32 {
        pod.priority.or_else(|| self.priority_class(pod.priority_class_name.as_ref()?)).unwrap_or(0)
    }

    /// From now on only namespaces seen (and labelled to opt in) take copies: the view
    /// follows a source that has namespaces.
    pub fn watch_namespaces(&mut self) {
        self.namespaces.get_or_insert_with(PMap::default);
    }

    pub fn apply_namespace(&mut self, ns: Namespace) {
        self.namespaces.get_or_insert_with(PMap::default).insert(ns.name, ns.opt_in);
    }

    pub fn remove_namespace(&mut self, name: &str) -> bool {
        self.namespaces.as_mut().is_some_and(|m| m.remove(name).is_some())
    }

    pub fn namespace_names(&self) -> impl Iterator<Item = &str> {
        self.namespaces.iter().flat_map(|m| m.keys().map(String::as_str))
    }

    /// What `namespace` opted in to (`NamespaceOptIn::WITHOUT_NAMESPACES` where the source
    /// has no namespaces; nothing for one not seen).
    pub fn namespace_opt_in(&self, namespace: &str) -> NamespaceOptIn {
        match &self.namespaces {
            None => NamespaceOptIn::WITHOUT_NAMESPACES,
            Some(m) => m.get(namespace).copied().unwrap_or_default(),
        }
    }

    /// The context `priority_classes` and `namespaces` give (`None`: the source has none).
    pub fn of(priority_classes: Vec<PriorityClass>, namespaces: Option<Vec<Namespace>>) -> PodContext {
        let mut context = PodContext::default();
        for pc in priority_classes {
            context.apply_priority_class(pc);
        }
        if let Some(namespaces) = namespaces {
            context.watch_namespaces();
            for ns in namespaces {
                context.apply_namespace(ns);
            }
        }
        context
    }
}
