//! Building a `SpawnSpec` (`mig spawn`'s request): `SpawnSpec::new` with
//! the program and its arguments, then a setter for each field that is not
//! as `new` leaves it, so a request says only what differs.
//!
//! What does not live here: the type and what each field means
//! (`msg::SpawnSpec`), and the checks the master makes of a request.

use crate::msg::{IoClass, JobClass, SpawnSpec, Tid};

impl SpawnSpec {
    /// One VP of `program` with `args`, started in `/` with no variables
    /// of its own, not waited for, by no VP, placed as the master chooses
    /// (no memory asked for, no class, little I/O), neither independent nor
    /// restartable.
    ///
    /// ```
    /// use libmig::msg::{JobClass, SpawnSpec};
    ///
    /// let spec = SpawnSpec::new("pi", vec!["1000".into()])
    ///     .n(8)
    ///     .wait(true)
    ///     .class(JobClass::Cluster);
    /// assert_eq!((spec.n, spec.cwd.as_str()), (8, "/"));
    /// assert_eq!(spec.memory_mb, None);
    /// ```
    pub fn new(program: impl Into<String>, args: Vec<String>) -> SpawnSpec {
        SpawnSpec {
            program: program.into(),
            args,
            n: 1,
            cwd: "/".into(),
            env: Vec::new(),
            wait: false,
            parent: None,
            independent: false,
            restartable: false,
            memory_mb: None,
            class: None,
            io: None,
            bid_hosts: Vec::new(),
        }
    }

    /// Its class for the bidding placement: as `class` says, else simple
    /// for one VP and a group for more.
    pub fn job_class(&self) -> JobClass {
        self.class.unwrap_or(if self.n == 1 {
            JobClass::Simple
        } else {
            JobClass::Group
        })
    }

    /// `n` VPs.
    pub fn n(mut self, n: u32) -> SpawnSpec {
        self.n = n;
        self
    }

    /// Started in directory `cwd` (the program's path may be relative to
    /// it).
    pub fn cwd(mut self, cwd: impl Into<String>) -> SpawnSpec {
        self.cwd = cwd.into();
        self
    }

    /// With these variables in every VP's environment.
    pub fn env(mut self, env: Vec<(String, String)>) -> SpawnSpec {
        self.env = env;
        self
    }

    /// Whether output and statuses stream back until the job ends.
    pub fn wait(mut self, wait: bool) -> SpawnSpec {
        self.wait = wait;
        self
    }

    /// Asked for by VP `parent`.
    pub fn parent(mut self, parent: impl Into<Option<Tid>>) -> SpawnSpec {
        self.parent = parent.into();
        self
    }

    /// Whether its VPs need no coordination (see `SpawnSpec::independent`).
    pub fn independent(mut self, independent: bool) -> SpawnSpec {
        self.independent = independent;
        self
    }

    /// Whether a VP that cannot be moved may be started again elsewhere
    /// (see `SpawnSpec::restartable`).
    pub fn restartable(mut self, restartable: bool) -> SpawnSpec {
        self.restartable = restartable;
        self
    }

    /// The memory each VP needs, in MB.
    pub fn memory_mb(mut self, mb: impl Into<Option<u64>>) -> SpawnSpec {
        self.memory_mb = mb.into();
        self
    }

    /// How its VPs want to be placed.
    pub fn class(mut self, class: impl Into<Option<JobClass>>) -> SpawnSpec {
        self.class = class.into();
        self
    }

    /// How much I/O each VP does.
    pub fn io(mut self, io: impl Into<Option<IoClass>>) -> SpawnSpec {
        self.io = io.into();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setter_sets_its_field_and_no_other() {
        let spec = SpawnSpec::new("pi", vec!["1000".into()])
            .n(8)
            .cwd("/tmp")
            .env(vec![("A".into(), "1".into())])
            .wait(true)
            .parent(7)
            .independent(true)
            .restartable(true)
            .memory_mb(4096)
            .class(JobClass::Cluster)
            .io(IoClass::Heavy);
        let literal = SpawnSpec {
            program: "pi".into(),
            args: vec!["1000".into()],
            n: 8,
            cwd: "/tmp".into(),
            env: vec![("A".into(), "1".into())],
            wait: true,
            parent: Some(7),
            independent: true,
            restartable: true,
            memory_mb: Some(4096),
            class: Some(JobClass::Cluster),
            io: Some(IoClass::Heavy),
            bid_hosts: Vec::new(),
        };
        assert_eq!(spec, literal);
        let plain = SpawnSpec::new("pi", Vec::new());
        assert_eq!(
            (plain.n, plain.wait, plain.parent, plain.memory_mb),
            (1, false, None, None)
        );
    }
}
