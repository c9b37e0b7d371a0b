//! What a pod's spec asks of its node, decoded only as far as Pod Security's baseline
//! profile looks (`model::baseline`), and the first of its controls the spec exceeds: a
//! requeue copy carries none of it unless its namespace opted in, so such a bare pod is
//! not requeued elsewhere. The same checks as admission's, on the same fields. (`k8s`
//! decodes the pod around these and hands them over: this file names nothing of it.)

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use crate::model::baseline::{
    apparmor_annotation_allowed, BaselineControl, ALLOWED_CAPABILITIES, ALLOWED_PROFILE_TYPES, ALLOWED_SELINUX_TYPES,
    APPARMOR_ANNOTATION_PREFIX, SAFE_SYSCTLS,
};
use crate::model::Labels;

/// A pod's or container's `securityContext`: what baseline reads of either, each value
/// judged as it is read (`Judged`: no string is kept). Absent and `null` read alike.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SecurityContext {
    #[serde(default)]
    pub privileged: Option<bool>,
    #[serde(default)]
    pub capabilities: Option<Capabilities>,
    #[serde(default)]
    pub proc_mount: Judged<NotDefaultProcMount>,
    #[serde(default)]
    pub seccomp_profile: Option<ProfileType>,
    #[serde(default)]
    pub app_armor_profile: Option<ProfileType>,
    #[serde(default)]
    pub se_linux_options: Option<SeLinuxOptions>,
    #[serde(default)]
    pub windows_options: Option<WindowsOptions>,
    /// Pod level only.
    #[serde(default)]
    pub sysctls: AnyOf<Sysctl>,
}

#[derive(Deserialize, Default)]
pub struct Capabilities {
    #[serde(default)]
    pub add: AnyOf<Judged<BeyondDefaultCapabilities>>,
}

/// `seccompProfile` or `appArmorProfile`: only its type.
#[derive(Deserialize, Default)]
pub struct ProfileType {
    #[serde(rename = "type", default)]
    pub type_: Judged<NotAllowedProfile>,
}

#[derive(Deserialize, Default)]
pub struct SeLinuxOptions {
    #[serde(rename = "type", default)]
    pub type_: Judged<NotBaselineSeLinuxType>,
    #[serde(default)]
    pub user: Judged<NonEmpty>,
    #[serde(default)]
    pub role: Judged<NonEmpty>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct WindowsOptions {
    #[serde(default)]
    pub host_process: Option<bool>,
}

#[derive(Deserialize, Default)]
pub struct Sysctl {
    #[serde(default)]
    pub name: Judged<UnsafeSysctl>,
}

/// A volume: only whether it mounts a path of the host.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    #[serde(default)]
    pub host_path: Option<serde::de::IgnoredAny>,
}

/// A probe or a lifecycle handler: only whether its httpGet or tcpSocket aims at a host.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Handler {
    #[serde(default)]
    pub http_get: Option<HostOnly>,
    #[serde(default)]
    pub tcp_socket: Option<HostOnly>,
}

#[derive(Deserialize, Default)]
pub struct HostOnly {
    #[serde(default)]
    pub host: Judged<NonEmpty>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    #[serde(default)]
    pub post_start: Option<Handler>,
    #[serde(default)]
    pub pre_stop: Option<Handler>,
}

impl Handler {
    fn aims_elsewhere(h: &Option<Handler>) -> bool {
        let set = |x: &Option<HostOnly>| x.as_ref().is_some_and(|x| x.host.forbidden());
        h.as_ref().is_some_and(|h| set(&h.http_get) || set(&h.tcp_socket))
    }
}

/// What baseline forbids of a string field.
pub trait Rule {
    fn forbids(value: &str) -> bool;
}

/// Set at all (a probe's host, an SELinux user or role).
pub struct NonEmpty;
impl Rule for NonEmpty {
    fn forbids(v: &str) -> bool {
        !v.is_empty()
    }
}

/// A seccomp or AppArmor profile type but RuntimeDefault and Localhost.
pub struct NotAllowedProfile;
impl Rule for NotAllowedProfile {
    fn forbids(v: &str) -> bool {
        !ALLOWED_PROFILE_TYPES.contains(&v)
    }
}

/// An SELinux type outside baseline's.
pub struct NotBaselineSeLinuxType;
impl Rule for NotBaselineSeLinuxType {
    fn forbids(v: &str) -> bool {
        !ALLOWED_SELINUX_TYPES.contains(&v)
    }
}

/// A `procMount` but Default.
pub struct NotDefaultProcMount;
impl Rule for NotDefaultProcMount {
    fn forbids(v: &str) -> bool {
        v != "Default"
    }
}

/// A capability beyond the default set.
pub struct BeyondDefaultCapabilities;
impl Rule for BeyondDefaultCapabilities {
    fn forbids(v: &str) -> bool {
        !ALLOWED_CAPABILITIES.contains(&v)
    }
}

/// A sysctl outside the safe set.
pub struct UnsafeSysctl;
impl Rule for UnsafeSysctl {
    fn forbids(v: &str) -> bool {
        !SAFE_SYSCTLS.contains(&v)
    }
}

/// Something decoded only as far as whether baseline forbids it.
pub trait Forbidden {
    fn forbidden(&self) -> bool;
}

/// A string judged by `R` as it is read: nothing of it is kept, so nothing is allocated.
/// Absent and `null` are allowed.
pub struct Judged<R>(bool, PhantomData<R>);

impl<R> Default for Judged<R> {
    fn default() -> Self {
        Judged(false, PhantomData)
    }
}

impl<R> Forbidden for Judged<R> {
    fn forbidden(&self) -> bool {
        self.0
    }
}

impl Forbidden for Sysctl {
    fn forbidden(&self) -> bool {
        self.name.forbidden()
    }
}

impl<'de, R: Rule> Deserialize<'de> for Judged<R> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<R>(PhantomData<R>);
        impl<'de, R: Rule> Visitor<'de> for V<R> {
            type Value = Judged<R>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Judged(R::forbids(v), PhantomData))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Judged::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Judged::default())
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A list judged element by element (`T`) as it is read: is any forbidden? Nothing of it
/// is kept. Absent and `null` are an empty list.
pub struct AnyOf<T>(bool, PhantomData<T>);

impl<T> Default for AnyOf<T> {
    fn default() -> Self {
        AnyOf(false, PhantomData)
    }
}

impl<T> Forbidden for AnyOf<T> {
    fn forbidden(&self) -> bool {
        self.0
    }
}

impl<'de, T: Deserialize<'de> + Forbidden> Deserialize<'de> for AnyOf<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Forbidden> Visitor<'de> for V<T> {
            type Value = AnyOf<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut any = false;
                while let Some(item) = seq.next_element::<T>()? {
                    any |= item.forbidden();
                }
                Ok(AnyOf(any, PhantomData))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(AnyOf::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(AnyOf::default())
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// What baseline reads of the pod's own fields.
pub struct PodLevel<'a> {
    pub host_network: Option<bool>,
    pub host_pid: Option<bool>,
    pub host_ipc: Option<bool>,
    /// `false`: a user namespace, where baseline allows any procMount.
    pub host_users: Option<bool>,
    pub security_context: &'a SecurityContext,
    pub volumes: &'a [Volume],
}

/// What baseline reads of a container or an init container.
pub struct ContainerLevel<'a> {
    pub security_context: &'a SecurityContext,
    /// One of its ports has a hostPort.
    pub host_port: bool,
    /// Its liveness, readiness and startup probes, its lifecycle's postStart and preStop.
    pub handlers: [&'a Option<Handler>; 5],
}

/// The first control of baseline the pod exceeds (its own fields, its containers and init
/// containers, its annotations), in the standard's order; `None` for a pod baseline
/// admits. Ephemeral containers are not looked at: a copy leaves them behind (they
/// cannot be set at creation). One pass over the pod, as it is decoded.
pub fn first_exceeded<'a>(
    pod: PodLevel<'a>,
    containers: impl Iterator<Item = ContainerLevel<'a>>,
    annotations: &Labels,
) -> Option<BaselineControl> {
    use BaselineControl as B;
    let mut found = Found::default();
    found.mark(B::HostNamespaces, [pod.host_network, pod.host_pid, pod.host_ipc].contains(&Some(true)));
    found.mark(B::HostPathVolumes, pod.volumes.iter().any(|v| v.host_path.is_some()));
    found.mark(B::Sysctls, pod.security_context.sysctls.forbidden());
    let apparmor = |(k, v): (&str, &str)| k.starts_with(APPARMOR_ANNOTATION_PREFIX) && !apparmor_annotation_allowed(v);
    found.mark(B::AppArmor, annotations.iter().any(apparmor));
    found.either_level(pod.security_context);
    for c in containers {
        let sc = c.security_context;
        found.either_level(sc);
        found.mark(B::Privileged, sc.privileged == Some(true));
        found.mark(B::Capabilities, sc.capabilities.as_ref().is_some_and(|c| c.add.forbidden()));
        found.mark(B::HostPorts, c.host_port);
        found.mark(B::ProcMount, sc.proc_mount.forbidden() && pod.host_users != Some(false));
        found.mark(B::ProbeOrLifecycleHost, c.handlers.iter().any(|h| Handler::aims_elsewhere(h)));
    }
    found.first()
}

/// The controls found exceeded, one bit each.
#[derive(Default)]
struct Found(u16);

impl Found {
    fn mark(&mut self, control: BaselineControl, exceeded: bool) {
        if exceeded {
            self.0 |= 1 << control as u16;
        }
    }

    /// What baseline reads alike on the pod's and on a container's security context.
    fn either_level(&mut self, sc: &SecurityContext) {
        use BaselineControl as B;
        let forbidden = |p: &Option<ProfileType>| p.as_ref().is_some_and(|p| p.type_.forbidden());
        let selinux = sc
            .se_linux_options
            .as_ref()
            .is_some_and(|o| o.type_.forbidden() || o.user.forbidden() || o.role.forbidden());
        self.mark(B::HostProcess, sc.windows_options.as_ref().and_then(|w| w.host_process) == Some(true));
        self.mark(B::AppArmor, forbidden(&sc.app_armor_profile));
        self.mark(B::SeLinux, selinux);
        self.mark(B::Seccomp, forbidden(&sc.seccomp_profile));
    }

    /// The first in the standard's order.
    fn first(&self) -> Option<BaselineControl> {
        BaselineControl::ALL.into_iter().find(|c| self.0 & (1 << *c as u16) != 0)
    }
}
