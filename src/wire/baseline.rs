//! What a pod's spec asks of its node, decoded only as far as Pod Security's baseline
//! profile looks (`model::baseline`), and the first of its controls the spec exceeds: a
//! requeue copy carries none of it unless its namespace opted in, so such a bare pod is
//! not requeued elsewhere. The same checks as admission's, on the same fields. (`k8s`
//! decodes the pod around these and hands them over: this file names nothing of it.)

use serde::Deserialize;

use crate::model::baseline::{
    apparmor_annotation_allowed, BaselineControl, ALLOWED_CAPABILITIES, ALLOWED_PROFILE_TYPES, ALLOWED_SELINUX_TYPES,
    APPARMOR_ANNOTATION_PREFIX, SAFE_SYSCTLS,
};
use crate::model::Labels;

/// A pod's or container's `securityContext`: what baseline reads of either. (Absent and
/// `null` read alike: every field is optional.)
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SecurityContext {
    #[serde(default)]
    pub privileged: Option<bool>,
    #[serde(default)]
    pub capabilities: Option<Capabilities>,
    #[serde(default)]
    pub proc_mount: Option<String>,
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
    pub sysctls: Option<Vec<Sysctl>>,
}

#[derive(Deserialize, Default)]
pub struct Capabilities {
    #[serde(default)]
    pub add: Option<Vec<String>>,
}

/// `seccompProfile` or `appArmorProfile`: only its type.
#[derive(Deserialize, Default)]
pub struct ProfileType {
    #[serde(rename = "type", default)]
    pub type_: Option<String>,
}

#[derive(Deserialize, Default)]
pub struct SeLinuxOptions {
    #[serde(rename = "type", default)]
    pub type_: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub role: Option<String>,
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
    pub name: Option<String>,
}

/// A volume: only whether it mounts a path of the host.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    #[serde(default)]
    pub host_path: Option<serde::de::IgnoredAny>,
}

/// A probe or a lifecycle handler: only the host its httpGet or tcpSocket aims at.
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
    pub host: Option<String>,
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
        let set = |x: &Option<HostOnly>| x.as_ref().and_then(|x| x.host.as_deref()).is_some_and(|h| !h.is_empty());
        h.as_ref().is_some_and(|h| set(&h.http_get) || set(&h.tcp_socket))
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
/// cannot be set at creation).
pub fn first_exceeded<'a, C>(pod: PodLevel<'a>, containers: C, annotations: &Labels) -> Option<BaselineControl>
where
    C: Iterator<Item = ContainerLevel<'a>> + Clone,
{
    use BaselineControl as B;
    let any = |f: &dyn Fn(&ContainerLevel) -> bool| containers.clone().any(|c| f(&c));
    let contexts = || std::iter::once(pod.security_context).chain(containers.clone().map(|c| c.security_context));
    let forbidden = |p: &Option<ProfileType>| {
        p.as_ref().and_then(|p| p.type_.as_deref()).is_some_and(|t| !ALLOWED_PROFILE_TYPES.contains(&t))
    };
    let set = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    let selinux_forbidden = |o: &Option<SeLinuxOptions>| {
        o.as_ref().is_some_and(|o| {
            !ALLOWED_SELINUX_TYPES.contains(&o.type_.as_deref().unwrap_or_default()) || set(&o.user) || set(&o.role)
        })
    };
    let exceeds = |control: B| match control {
        B::HostProcess => contexts().any(|s| s.windows_options.as_ref().and_then(|w| w.host_process) == Some(true)),
        B::HostNamespaces => [pod.host_network, pod.host_pid, pod.host_ipc].contains(&Some(true)),
        B::Privileged => any(&|c| c.security_context.privileged == Some(true)),
        B::Capabilities => any(&|c| {
            let added = c.security_context.capabilities.as_ref().and_then(|c| c.add.as_deref()).unwrap_or_default();
            added.iter().any(|a| !ALLOWED_CAPABILITIES.contains(&a.as_str()))
        }),
        B::HostPathVolumes => pod.volumes.iter().any(|v| v.host_path.is_some()),
        B::HostPorts => any(&|c| c.host_port),
        B::AppArmor => {
            contexts().any(|s| forbidden(&s.app_armor_profile))
                || annotations
                    .iter()
                    .any(|(k, v)| k.starts_with(APPARMOR_ANNOTATION_PREFIX) && !apparmor_annotation_allowed(v))
        }
        B::SeLinux => contexts().any(|s| selinux_forbidden(&s.se_linux_options)),
        B::ProcMount => {
            pod.host_users != Some(false)
                && any(&|c| c.security_context.proc_mount.as_deref().is_some_and(|m| m != "Default"))
        }
        B::Seccomp => contexts().any(|s| forbidden(&s.seccomp_profile)),
        B::Sysctls => pod
            .security_context
            .sysctls
            .iter()
            .flatten()
            .any(|s| !SAFE_SYSCTLS.contains(&s.name.as_deref().unwrap_or_default())),
        B::ProbeOrLifecycleHost => any(&|c| c.handlers.iter().any(|h| Handler::aims_elsewhere(h))),
    };
    B::ALL.into_iter().find(|c| exceeds(*c))
}
