//! The knapsack policies across GPU types against a brute force over types, counts and integer
//! batches, and on one type whose jobs run alike against the plain path.

use super::*;

/// A fleet of two types, `slow` and `fast`, of `nodes × per_node` GPUs each.
fn two_types(slow: (u32, u32), fast: (u32, u32)) -> Fleet {
    let pool = |name: &str, (nodes, gpus_per_node): (u32, u32)| crate::GpuPool {
        name: name.into(),
        nodes,
        gpus_per_node,
        memory_gib: 16.0,
    };
    Fleet::new(vec![pool("slow", slow), pool("fast", fast)]).unwrap()
}

/// A job's values per type: (type, its (count, value) pairs).
type TypedValues = Vec<(usize, Vec<(u32, f64)>)>;

/// Brute force across GPU types, written independently of `options`, the typed knapsack and the
/// policy: per job and type, [`Brute`]'s values on that type's cluster with the job's model
/// there, one reference per job (its best smallest-count metric over its types), every option on
/// a type it does not run on a change from where it runs, at the counts `allowed` on each type
/// (the shape rule's) and its own count where it runs; admission in service order, each job
/// on the type where its smallest option is worth most among those with room (ties: the
/// first), else on the type worth most where moving jobs placed there to their best other type
/// with room frees enough; then every combination of (type, count).
fn typed_brute(
    fleet: &Fleet,
    settings: &Settings,
    allowed: &[Vec<bool>],
    jobs: &[Job],
) -> (Vec<JobState>, f64) {
    let pools = fleet.pools();
    let clusters: Vec<Cluster> = pools.iter().map(|p| p.cluster()).collect();
    let brute = |t: usize| Brute {
        cluster: &clusters[t],
        settings,
        fixed_batch: false,
    };
    let values: Vec<TypedValues> = jobs
        .iter()
        .map(|job| {
            let here = job
                .current
                .and(job.types.current.as_deref())
                .and_then(|name| fleet.index_of(name));
            let views: Vec<(usize, Job)> = pools
                .iter()
                .enumerate()
                .filter_map(|(t, pool)| {
                    let (model, limit) = job.on_type(&pool.name)?;
                    let mut view = job.clone();
                    view.throughput = model;
                    view.max_local_batch = limit;
                    if here != Some(t) {
                        view.current = None;
                    }
                    Some((t, view))
                })
                .collect();
            let reference = views
                .iter()
                .filter_map(|(t, view)| brute(*t).smallest_metric(view))
                .reduce(f64::max);
            views
                .iter()
                .map(|(t, view)| {
                    let moving_from = if here == Some(*t) { None } else { job.current };
                    let mut values = brute(*t).values_across(view, reference, moving_from);
                    // The counts the shape rule places on this type's nodes, and where it runs.
                    let current = view.current.map(|c| c.gpus);
                    values.retain(|&(g, _)| allowed[*t][g as usize] || Some(g) == current);
                    (*t, values)
                })
                .filter(|(_, v)| !v.is_empty())
                .collect()
        })
        .collect();
    let mut order: Vec<usize> = (0..jobs.len())
        .filter(|&i| jobs[i].current.is_some())
        .collect();
    order.extend((0..jobs.len()).filter(|&i| jobs[i].current.is_none()));
    let mut free = fleet.capacities();
    let mut states = vec![JobState::Dropped; jobs.len()];
    // Each admitted job's type, in the order they were placed there.
    let mut placed: Vec<(usize, usize)> = Vec::new();
    let smallest = |j: usize, t: usize| values[j].iter().find(|(u, _)| *u == t).map(|(_, v)| v[0]);
    // The type worth most (the first of equals) with room for job j's smallest option, but `not`.
    let with_room = |free: &[u32], j: usize, not: Option<usize>| {
        let mut fit: Option<(usize, u32, f64)> = None;
        for (t, v) in &values[j] {
            let (g, value) = v[0];
            if Some(*t) != not && g <= free[*t] && fit.is_none_or(|(_, _, best)| value > best) {
                fit = Some((*t, g, value));
            }
        }
        fit
    };
    let mut blocked = false;
    for i in order {
        if values[i].is_empty() {
            continue;
        }
        let new = jobs[i].current.is_none();
        let mut fit = with_room(&free, i, None).map(|(t, g, _)| (t, g));
        // No room anywhere: on the type worth most where moving the jobs placed there (the
        // latest first, each to its best other type with room) frees enough.
        let mut types: Vec<(usize, (u32, f64))> =
            values[i].iter().map(|(t, v)| (*t, v[0])).collect();
        types.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        if fit.is_some() || (blocked && new) {
            types.clear();
        }
        for (t, (g, _)) in types {
            let (mut room, mut kept) = (free.clone(), placed.clone());
            for k in (0..kept.len()).rev() {
                let (j, on) = kept[k];
                if on != t || room[t] >= g {
                    continue;
                }
                if let Some((u, gu, _)) = with_room(&room, j, Some(t)) {
                    room[u] -= gu;
                    room[t] += smallest(j, t).map_or(0, |(gt, _)| gt);
                    kept.remove(k);
                    kept.push((j, u));
                }
            }
            if room[t] >= g {
                (free, placed, fit) = (room, kept, Some((t, g)));
                break;
            }
        }
        match fit {
            Some((t, g)) if !(blocked && new) => {
                free[t] -= g;
                placed.push((i, t));
                states[i] = JobState::Running;
            }
            _ if settings.admission == Admission::Queue || !new => {
                states[i] = JobState::Queued;
                blocked |= new && !settings.backfill;
            }
            _ => {}
        }
    }
    let admitted: Vec<&TypedValues> = (0..jobs.len())
        .filter(|&i| states[i] == JobState::Running)
        .map(|i| &values[i])
        .collect();
    fn best(rest: &[&TypedValues], left: &mut Vec<u32>) -> f64 {
        let Some((first, tail)) = rest.split_first() else {
            return 0.0;
        };
        let mut top = f64::NEG_INFINITY;
        for (t, options) in first.iter() {
            for &(g, v) in options {
                if g <= left[*t] {
                    left[*t] -= g;
                    top = top.max(v + best(tail, left));
                    left[*t] += g;
                }
            }
        }
        top
    }
    (states, best(&admitted, &mut fleet.capacities()))
}

/// `raw`'s job, able to run on both of [`two_types`]: on `fast` its compute `speed` times
/// faster (synchronisation alike); running, if it does, on the type `on` names, when its count
/// fits there.
fn typed_job(index: usize, raw: &RawJob, speed: f64, on: usize, fleet: &Fleet) -> Option<Job> {
    let mut job = build(index, raw)?;
    let fast = AnalyticModel {
        compute_base_s: raw.model.compute_base_s / speed,
        compute_per_sample_s: raw.model.compute_per_sample_s / speed,
        ..raw.model
    };
    let on_type = |name: &str, model: AnalyticModel| crate::job::JobOnType {
        gpu_type: name.into(),
        throughput: Arc::new(model),
        max_local_batch: job.max_local_batch,
    };
    job.types.on = Arc::from([on_type("slow", raw.model), on_type("fast", fast)]);
    let pool = &fleet.pools()[on];
    if job.current.is_some_and(|c| c.gpus > pool.gpus()) {
        job.current = None;
    }
    job.types.current = job.current.map(|_| pool.name.clone());
    Some(job)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn elastic_batch_across_types_matches_brute_force(
        raws in prop::collection::vec((raw_job(), 0usize..2), 2..=6),
        slow in (1u32..=2, 1u32..=3),
        fast in (1u32..=2, 1u32..=2),
        speed in 1.0..4.0f64,
        settings in settings(),
        masks in (any::<u8>(), any::<u8>(), any::<bool>()),
    ) {
        let fleet = two_types(slow, fast);
        // The counts each type's shape rule can place (bit g − 1 of its mask), or all.
        let allowed: Vec<Vec<bool>> = [masks.0, masks.1]
            .iter()
            .map(|&m| (0..=6u32).map(|g| g > 0 && (!masks.2 || m & (1 << (g - 1)) != 0)).collect())
            .collect();
        let jobs: Vec<Job> = raws
            .iter()
            .enumerate()
            .filter_map(|(i, (raw, on))| typed_job(i, raw, speed, *on, &fleet))
            .collect();
        prop_assume!(!jobs.is_empty());
        let cluster = fleet.pools()[0].cluster();
        let request = DecisionRequest {
            fleet: Some(&fleet),
            allowed_counts_on_types: Some(&allowed),
            ..DecisionRequest::new(&cluster, &jobs, &settings)
        };
        let mut policy = build_policy("elastic-batch", &PolicyOptions::default()).unwrap();
        let decision = policy.decide(&request);
        let mut used = vec![0; 2];
        for (job, d) in jobs.iter().zip(&decision.jobs) {
            prop_assert_eq!(&job.id, &d.id);
            if d.state == JobState::Running {
                let t = fleet.index_of(d.gpu_type.as_deref().unwrap_or("none")).unwrap();
                used[t] += d.gpus;
                prop_assert!(job.gpus.allows(d.gpus) && job.batch_fits(d.gpus, d.batch_size), "{:?}", d);
                let kept = job.current.is_some_and(|c| c.gpus == d.gpus) && job.types.current == d.gpu_type;
                prop_assert!(allowed[t][d.gpus as usize] || kept, "{:?} not allowed on {}", d, t);
            } else {
                prop_assert_eq!((d.gpus, &d.gpu_type), (0, &None));
            }
        }
        prop_assert!(used.iter().zip(fleet.capacities()).all(|(&u, c)| u <= c), "{:?}", used);
        let (states, best) = typed_brute(&fleet, &settings, &allowed, &jobs);
        let got: Vec<JobState> = decision.jobs.iter().map(|d| d.state).collect();
        prop_assert_eq!(&got, &states);
        prop_assert!(close(decision.objective, best), "dp {} vs brute {}", decision.objective, best);
        prop_assert_eq!(decision.gap, 0.0);
        // Same input, same output, from the same instance (its kept tables) too.
        prop_assert_eq!(&policy.decide(&request), &decision);
    }

    #[test]
    fn one_type_whose_jobs_run_alike_decides_as_the_cluster(
        raws in prop::collection::vec(raw_job(), 1..=6),
        nodes in 1u32..=4,
        per_node in 1u32..=4,
        settings in settings(),
    ) {
        let cluster = Cluster::new(nodes, per_node).unwrap();
        let jobs: Vec<Job> = raws.iter().enumerate().filter_map(|(i, r)| build(i, r)).collect();
        prop_assume!(!jobs.is_empty());
        let fleet = Fleet::uniform(cluster);
        for policy in ["elastic-batch", "elastic-gpu"] {
            let plain = decide(policy, &cluster, &jobs, &settings);
            let typed = build_policy(policy, &PolicyOptions::default()).unwrap().decide(
                &DecisionRequest { fleet: Some(&fleet), ..DecisionRequest::new(&cluster, &jobs, &settings) },
            );
            let states = |d: &Decision| d.jobs.iter().map(|j| j.state).collect::<Vec<_>>();
            prop_assert_eq!(states(&typed), states(&plain), "{}", policy);
            prop_assert!(close(typed.objective, plain.objective), "{}: {} vs {}", policy, typed.objective, plain.objective);
        }
    }
}

/// A job of `team` for the team tests on [`two_types`]: `gpus` GPUs (from `min`), on the
/// `types` named (twice as fast on `fast`), running on `fast` when `running`.
fn team_job(id: &str, team: &str, (min, gpus): (u32, u32), types: &[&str], running: bool) -> Job {
    let mut job = analytic_job(id, 0.001, 0.05);
    job.team = Some(team.into());
    job.gpus = GpuRange {
        min,
        max: gpus,
        powers_of_two: false,
    };
    job.requested = Requested {
        gpus: min,
        batch: 128,
    };
    let on_type = |name: &str| {
        let speed = if name == "fast" { 2.0 } else { 1.0 };
        crate::job::JobOnType {
            gpu_type: name.into(),
            throughput: Arc::new(AnalyticModel {
                compute_base_s: 0.01 / speed,
                compute_per_sample_s: 0.001 / speed,
                sync_intra_base_s: 0.05,
                sync_intra_per_gpu_s: 0.0,
                sync_inter_base_s: 0.1,
                sync_inter_per_gpu_s: 0.0,
                overlap_gamma: 1.0,
                max_local_batch: None,
            }),
            max_local_batch: job.max_local_batch,
        }
    };
    job.types.on = types.iter().map(|&t| on_type(t)).collect();
    job.current = running.then_some(CurrentAllocation {
        gpus,
        batch: 128,
        age_s: 600.0,
        restarts: 0,
        batch_in_place: false,
    });
    job.types.current = running.then(|| "fast".into());
    job
}

/// `jobs`' decision by elastic-batch on `fleet`, with `teams` when given: each job's id,
/// state, GPUs and type.
fn decide_on_fleet(
    fleet: &Fleet,
    teams: Option<&super::Teams>,
    jobs: &[Job],
) -> Vec<(String, JobState, u32, Option<String>)> {
    let settings = Settings {
        admission: Admission::Queue,
        ..Settings::default()
    };
    let cluster = fleet.pools()[0].cluster();
    let request = DecisionRequest {
        fleet: Some(fleet),
        teams,
        ..DecisionRequest::new(&cluster, jobs, &settings)
    };
    let decision = build_policy("elastic-batch", &PolicyOptions::default())
        .unwrap()
        .decide(&request);
    decision
        .jobs
        .iter()
        .map(|d| {
            (
                d.id.clone(),
                d.state,
                d.gpus,
                d.gpu_type.as_deref().map(String::from),
            )
        })
        .collect()
}

/// With teams on a fleet, the jobs the teams' admission lets in are placed onto types those
/// within their team's guarantee first: team a's job, which runs only on `fast`, arrives while
/// team b's four jobs borrow every `fast` GPU; b's jobs, which may run on either type, make
/// room (placed in service order, b's running jobs would keep `fast` and a's job would wait).
#[test]
fn a_teams_guaranteed_job_is_placed_before_borrowers_that_could_go_elsewhere() {
    use super::{TeamQuota, Teams};
    let fleet = two_types((1, 4), (1, 4));
    let quota = |guaranteed_gpus| TeamQuota {
        guaranteed_gpus,
        max_gpus: 8,
        lend_limit: None,
    };
    let teams = Teams::new(vec![("a".into(), quota(4)), ("b".into(), quota(0))], 8).unwrap();
    let jobs: Vec<Job> = (1..=4)
        .map(|i| team_job(&format!("b{i}"), "b", (1, 1), &["slow", "fast"], true))
        .chain([team_job("a1", "a", (4, 4), &["fast"], false)])
        .collect();
    let running = |id: &str, gpus, on: &str| (id.into(), JobState::Running, gpus, Some(on.into()));
    assert_eq!(
        decide_on_fleet(&fleet, Some(&teams), &jobs),
        [
            running("b1", 1, "slow"),
            running("b2", 1, "slow"),
            running("b3", 1, "slow"),
            running("b4", 1, "slow"),
            running("a1", 4, "fast"),
        ]
    );
}

/// Without teams, admission in service order makes room as it goes: four running jobs that may
/// run on either type hold every `fast` GPU when a job that runs only on `fast` arrives; they
/// move to `slow` (admitted first where they were, the new job would wait for one to end).
#[test]
fn a_job_held_to_one_type_gets_room_from_jobs_that_can_go_elsewhere() {
    let fleet = two_types((1, 4), (1, 4));
    let jobs: Vec<Job> = (1..=4)
        .map(|i| team_job(&format!("b{i}"), "b", (1, 1), &["slow", "fast"], true))
        .chain([team_job("a1", "a", (4, 4), &["fast"], false)])
        .collect();
    let decided = decide_on_fleet(&fleet, None, &jobs);
    let states: Vec<(JobState, Option<&str>)> =
        decided.iter().map(|d| (d.1, d.3.as_deref())).collect();
    assert_eq!(
        states,
        [
            (JobState::Running, Some("slow")),
            (JobState::Running, Some("slow")),
            (JobState::Running, Some("slow")),
            (JobState::Running, Some("slow")),
            (JobState::Running, Some("fast")),
        ],
        "{decided:?}"
    );
}

/// Floors the types cannot all meet: teams a and b are each guaranteed 4 GPUs and their jobs
/// run only on `fast`, which has 4. The guarantees give way (a and b share `fast`), while the
/// lend limit of team d, which has no jobs, still keeps its 2 GPUs idle: team c's job, which
/// without teams would take every `slow` GPU, gets what is left of `slow`.
#[test]
fn floors_the_types_cannot_meet_give_way_and_lend_limits_still_keep() {
    use super::{TeamQuota, Teams};
    let fleet = two_types((1, 8), (1, 4));
    let quota = |guaranteed_gpus, lend_limit| TeamQuota {
        guaranteed_gpus,
        max_gpus: 12,
        lend_limit,
    };
    let teams = Teams::new(
        vec![
            ("a".into(), quota(4, None)),
            ("b".into(), quota(4, None)),
            ("c".into(), quota(0, None)),
            ("d".into(), quota(2, Some(0))),
        ],
        12,
    )
    .unwrap();
    let jobs = [
        team_job("a1", "a", (1, 4), &["fast"], false),
        team_job("b1", "b", (1, 4), &["fast"], false),
        team_job("c1", "c", (1, 8), &["slow", "fast"], false),
    ];
    let c1 = |decided: &[(String, JobState, u32, Option<String>)]| decided[2].clone();
    // Without teams c's job takes all of `slow`.
    let plain = decide_on_fleet(&fleet, None, &jobs);
    assert_eq!(
        c1(&plain),
        ("c1".into(), JobState::Running, 8, Some("slow".into()))
    );
    let decided = decide_on_fleet(&fleet, Some(&teams), &jobs);
    let on_fast: u32 = decided[..2]
        .iter()
        .map(|(_, state, gpus, on)| {
            assert_eq!((*state, on.as_deref()), (JobState::Running, Some("fast")));
            gpus
        })
        .sum();
    assert_eq!(on_fast, 4, "{decided:?}");
    assert_eq!(
        c1(&decided),
        ("c1".into(), JobState::Running, 6, Some("slow".into()))
    );
}

/// Keeps the types cannot meet: team a keeps its whole guarantee (lend limit 0) but its job,
/// held to `slow`, shares it with team c's, which needs 3 of its 4 GPUs; team b's job, held to
/// `fast`, may take 1. Neither the guarantees nor the keeps can all be met; the maxima still
/// hold (before, the decision fell back to no teams at all, and b's job took all of `fast`).
#[test]
fn keeps_the_types_cannot_meet_give_way_and_maxima_still_hold() {
    use super::{TeamQuota, Teams};
    let fleet = two_types((1, 4), (1, 4));
    let quota = |guaranteed_gpus, max_gpus, lend_limit| TeamQuota {
        guaranteed_gpus,
        max_gpus,
        lend_limit,
    };
    let teams = Teams::new(
        vec![
            ("a".into(), quota(4, 4, Some(0))),
            ("b".into(), quota(0, 1, None)),
            ("c".into(), quota(0, 8, None)),
        ],
        8,
    )
    .unwrap();
    let jobs = [
        team_job("a1", "a", (1, 4), &["slow"], false),
        team_job("b1", "b", (1, 4), &["fast"], false),
        team_job("c1", "c", (3, 3), &["slow"], false),
    ];
    let decided = decide_on_fleet(&fleet, Some(&teams), &jobs);
    for ((id, state, gpus, _), most) in decided.iter().zip([4, 1, 8]) {
        assert!(
            *state != JobState::Running || *gpus <= most,
            "{id} beyond its team's maximum: {decided:?}"
        );
    }
    assert_eq!(
        decided[1],
        ("b1".into(), JobState::Running, 1, Some("fast".into()))
    );
}
