//! Which user and groups a container's process runs as, as kubelet and containerd decide:
//! `runAsUser`/`runAsGroup` of the container, else of the pod, else the image's `User`
//! (`uid`, `uid:gid`, `name` or `name:group`, names looked up in the image's `/etc/passwd`
//! and `/etc/group`); supplementary groups are the groups `/etc/group` lists the user in,
//! then the pod's `supplementalGroups` and `fsGroup`. `runAsNonRoot` refuses uid 0, and a
//! user name it cannot check.

use std::path::Path;

use super::pod::{ContainerSpec, PodSecurityContext};
use crate::agent::runtime::UserSpec;

/// Why the user cannot be decided: the container is not created
/// (`CreateContainerConfigError`).
pub type IdentityError = String;

/// The largest file read from the image (`/etc/passwd`, `/etc/group`).
const MAX_DB: u64 = 1 << 20;

/// The process identity of `container` in `pod_sc`'s pod, its image's `User` being
/// `image_user` and its root filesystem `rootfs`.
pub fn resolve(
    container: &ContainerSpec,
    pod_sc: &PodSecurityContext,
    image_user: Option<&str>,
    rootfs: &Path,
) -> Result<UserSpec, IdentityError> {
    let sc = &container.security_context;
    let id = |v: Option<i64>, what: &str| -> Result<Option<u32>, IdentityError> {
        v.map(|n| u32::try_from(n).map_err(|_| format!("{what} {n} is not a valid id")))
            .transpose()
    };
    let run_as_user = id(sc.run_as_user.or(pod_sc.run_as_user), "runAsUser")?;
    let run_as_group = id(sc.run_as_group.or(pod_sc.run_as_group), "runAsGroup")?;
    let non_root = sc.run_as_non_root.or(pod_sc.run_as_non_root) == Some(true);

    let passwd = read_db(rootfs, "etc/passwd");
    let group = read_db(rootfs, "etc/group");
    let (image_name, image_group) = match image_user.map(str::trim).filter(|u| !u.is_empty()) {
        Some(u) => match u.split_once(':') {
            Some((name, group)) => (Some(name), Some(group)),
            None => (Some(u), None),
        },
        None => (None, None),
    };

    // The user: the spec's number, else the image's (a number, or a name to look up).
    let (uid, user_name, user_gid) = match run_as_user {
        Some(uid) => {
            let entry = passwd.as_deref().and_then(|p| by_uid(p, uid));
            (uid, entry.as_ref().map(|e| e.0.clone()), entry.map(|e| e.2))
        }
        None => {
            match image_name {
                None => (0, Some("root".to_string()), Some(0)),
                Some(name) => match name.parse::<u32>() {
                    Ok(uid) => {
                        let entry = passwd.as_deref().and_then(|p| by_uid(p, uid));
                        (uid, entry.as_ref().map(|e| e.0.clone()), entry.map(|e| e.2))
                    }
                    Err(_) => {
                        if non_root {
                            return Err(format!(
                            "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root"
                        ));
                        }
                        let (_, uid, gid) = passwd
                        .as_deref()
                        .and_then(|p| by_name(p, name))
                        .ok_or_else(|| {
                            format!("unable to find user {name}: no matching entries in passwd file")
                        })?;
                        (uid, Some(name.to_string()), Some(gid))
                    }
                },
            }
        }
    };
    if non_root && uid == 0 {
        return Err("container has runAsNonRoot and image will run as root".to_string());
    }

    let gid = match run_as_group {
        Some(gid) => gid,
        None => match image_group.filter(|_| run_as_user.is_none()) {
            Some(g) => match g.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => group
                    .as_deref()
                    .and_then(|db| group_by_name(db, g))
                    .ok_or_else(|| {
                        format!("unable to find group {g}: no matching entries in group file")
                    })?,
            },
            None => user_gid.unwrap_or(0),
        },
    };

    let mut additional: Vec<u32> = Vec::new();
    if let (Some(name), Some(db)) = (user_name.as_deref(), group.as_deref()) {
        additional.extend(groups_of(db, name));
    }
    for g in pod_sc
        .supplemental_groups
        .iter()
        .chain(pod_sc.fs_group.iter())
    {
        let g = u32::try_from(*g).map_err(|_| format!("group {g} is not a valid id"))?;
        additional.push(g);
    }
    let mut seen = std::collections::BTreeSet::new();
    additional.retain(|g| *g != gid && seen.insert(*g));
    Ok(UserSpec {
        uid,
        gid,
        additional_gids: additional,
    })
}

/// A file of the image, read only if neither it nor its directory is a symlink (a symlink
/// would be resolved on the host, not in the container).
fn read_db(rootfs: &Path, rel: &str) -> Option<String> {
    use std::io::Read;
    let path = rootfs.join(rel);
    let dir = path.parent()?;
    if std::fs::symlink_metadata(dir)
        .ok()?
        .file_type()
        .is_symlink()
    {
        return None;
    }
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.file_type().is_file() {
        return None;
    }
    let mut text = String::new();
    std::fs::File::open(&path)
        .ok()?
        .take(MAX_DB)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// `name:x:uid:gid:…` lines.
fn passwd_entries(db: &str) -> impl Iterator<Item = (String, u32, u32)> + '_ {
    db.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        Some((
            f.first()?.to_string(),
            f.get(2)?.parse().ok()?,
            f.get(3)?.parse().ok()?,
        ))
    })
}

fn by_name(db: &str, name: &str) -> Option<(String, u32, u32)> {
    passwd_entries(db).find(|e| e.0 == name)
}

fn by_uid(db: &str, uid: u32) -> Option<(String, u32, u32)> {
    passwd_entries(db).find(|e| e.1 == uid)
}

/// `name:x:gid:member,member` lines.
fn group_entries(db: &str) -> impl Iterator<Item = (&str, u32, Vec<&str>)> + '_ {
    db.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        let members = f
            .get(3)
            .map(|m| m.split(',').filter(|m| !m.is_empty()).collect())
            .unwrap_or_default();
        Some((*f.first()?, f.get(2)?.parse().ok()?, members))
    })
}

fn group_by_name(db: &str, name: &str) -> Option<u32> {
    group_entries(db).find(|g| g.0 == name).map(|g| g.1)
}

fn groups_of(db: &str, user: &str) -> Vec<u32> {
    group_entries(db)
        .filter(|g| g.2.contains(&user))
        .map(|g| g.1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::pods::pod::ContainerSecurityContext;

    fn rootfs() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\nweb:x:1000:1001::/home/web:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("etc/group"),
            "root:x:0:\nweb:x:1001:\nwheel:x:10:web,other\naudio:x:29:web\n",
        )
        .unwrap();
        dir
    }

    fn container(sc: ContainerSecurityContext) -> ContainerSpec {
        ContainerSpec {
            name: "c".into(),
            security_context: sc,
            ..ContainerSpec::default()
        }
    }

    #[test]
    fn the_spec_wins_then_the_image_names_are_looked_up() {
        let fs = rootfs();
        let pod = PodSecurityContext {
            supplemental_groups: vec![5000],
            fs_group: Some(2000),
            ..Default::default()
        };
        let none = container(ContainerSecurityContext::default());
        let u = resolve(&none, &pod, Some("web"), fs.path()).unwrap();
        assert_eq!((u.uid, u.gid), (1000, 1001));
        assert_eq!(u.additional_gids, [10, 29, 5000, 2000]);

        let u = resolve(&none, &pod, None, fs.path()).unwrap();
        assert_eq!((u.uid, u.gid), (0, 0));

        let u = resolve(
            &none,
            &PodSecurityContext::default(),
            Some("1000:wheel"),
            fs.path(),
        )
        .unwrap();
        assert_eq!((u.uid, u.gid), (1000, 10));

        let spec = container(ContainerSecurityContext {
            run_as_user: Some(42),
            run_as_group: Some(43),
            ..Default::default()
        });
        let u = resolve(&spec, &pod, Some("web"), fs.path()).unwrap();
        assert_eq!((u.uid, u.gid), (42, 43));
        assert_eq!(u.additional_gids, [5000, 2000]);
    }

    #[test]
    fn run_as_non_root_and_unknown_names_are_errors() {
        let fs = rootfs();
        let non_root = PodSecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        };
        let c = container(ContainerSecurityContext::default());
        let e = resolve(&c, &non_root, None, fs.path()).unwrap_err();
        assert!(e.contains("will run as root"), "{e}");
        let e = resolve(&c, &non_root, Some("web"), fs.path()).unwrap_err();
        assert!(e.contains("non-numeric user (web)"), "{e}");
        assert!(resolve(&c, &non_root, Some("1000"), fs.path()).is_ok());
        let e = resolve(
            &c,
            &PodSecurityContext::default(),
            Some("nobody"),
            fs.path(),
        )
        .unwrap_err();
        assert!(e.contains("unable to find user nobody"), "{e}");
    }

    #[test]
    fn a_symlinked_passwd_is_not_read() {
        let fs = rootfs();
        std::fs::remove_file(fs.path().join("etc/passwd")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", fs.path().join("etc/passwd")).unwrap();
        let c = container(ContainerSecurityContext::default());
        assert!(resolve(&c, &PodSecurityContext::default(), Some("root"), fs.path()).is_err());
    }
}
