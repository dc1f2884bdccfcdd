//! How an [`Explanation`] reads: its one-line summary ([`fmt::Display`]), with the GPU type
//! it runs on where the cluster has several. Every figure comes from the explanation itself.

use std::fmt;

use super::*;

/// `1 GPU`, `4 GPUs`.
fn gpus(n: GpuCount) -> String {
    if n == 1 {
        "1 GPU".to_string()
    } else {
        format!("{n} GPUs")
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`.
fn ordinal(n: GpuCount) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// A fraction as a percentage: `3 %`, `2.5 %`, `40 %`.
fn percent(x: f64) -> String {
    let p = x * 100.0;
    let text = if p.abs() >= 10.0 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    };
    format!("{} %", text.strip_suffix(".0").unwrap_or(&text))
}

/// Samples per second in plain words: whole above 10, else to two decimals.
fn rate(samples_per_s: f64) -> String {
    if samples_per_s.abs() >= 10.0 {
        format!("{samples_per_s:.0}")
    } else {
        format!("{samples_per_s:.2}")
    }
}

/// `a100`, `t4 and a100`, `t4, v100 and a100`.
fn listed(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

impl fmt::Display for Explanation {
    /// In plain words, e.g. `held at 4 GPUs: a 5th would add 3 % (minimum gain 5 %); c would
    /// lose it`; on a fleet followed by the type, e.g. `; 2 × a100 rather than 8 × t4: 2 × a100
    /// gives 2000 samples/s of progress against 1600, for fewer GPUs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_decision(f)?;
        match &self.types {
            Some(types) => self.fmt_types(types, f),
            None => Ok(()),
        }
    }
}

impl Explanation {
    /// Where it runs among the GPU types and why not on the other type its policy valued most;
    /// the types it is limited to.
    fn fmt_types(&self, t: &TypeChoice, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(here), Some(has)) = (&t.gpu_type, t.progress_samples_per_s) {
            let chosen = format!("{} × {here}", self.gpus);
            let other = t.others.iter().reduce(|best, o| {
                if o.best.value_change > best.best.value_change {
                    o
                } else {
                    best
                }
            });
            match other {
                Some(o) => {
                    let there = format!("{} × {}", o.best.gpus, o.gpu_type);
                    let (p, q) = (rate(has), rate(o.best.progress_samples_per_s));
                    let against =
                        format!("{there} would give {q} samples/s of progress against {p}");
                    write!(f, "; {chosen}")?;
                    match &o.reason {
                        TypeReason::Held => write!(f, ", held where it runs: {against}")?,
                        TypeReason::NoFaster => {
                            let fewer = match self.gpus.cmp(&o.best.gpus) {
                                std::cmp::Ordering::Less => ", for fewer GPUs",
                                std::cmp::Ordering::Equal => ", on as many GPUs",
                                std::cmp::Ordering::Greater => "",
                            };
                            write!(
                                f,
                                " rather than {there}: {chosen} gives {p} samples/s of progress \
                                 against {q}{fewer}"
                            )?
                        }
                        TypeReason::MoveCost { min_gain, cost_s } => {
                            let gain = o.best.progress_samples_per_s / has - 1.0;
                            write!(
                                f,
                                " rather than {there}: {there} would add {} of progress ({q} \
                                 samples/s against {p}), too little to pay for the move",
                                percent(gain)
                            )?;
                            if *min_gain > 0.0 {
                                write!(f, " (minimum gain {})", percent(*min_gain))?;
                            } else if *cost_s > 0.0 {
                                write!(f, " (a restart costs {cost_s} s of progress)")?;
                            }
                        }
                        TypeReason::Taken => {
                            let free = match o.free_gpus {
                                0 => format!("no {} GPU is free", o.gpu_type),
                                1 => format!("only 1 {} GPU is free", o.gpu_type),
                                n => format!("only {n} {} GPUs are free", o.gpu_type),
                            };
                            write!(f, " rather than {there}: {against}, but {free}")?
                        }
                        TypeReason::Policy { policy } => write!(
                            f,
                            " rather than {there}, as policy {policy} decides ({against})"
                        )?,
                    }
                }
                None if t.only_on.is_none() => write!(f, "; on {here}")?,
                None => {}
            }
        }
        if let Some(only) = &t.only_on {
            write!(f, "; it may run only on {}", listed(only))?;
        }
        Ok(())
    }

    /// What the decision made of it, in plain words (its GPUs alike).
    fn fmt_decision(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.gpus;
        // "a 5th" for one GPU more, "8 GPUs" for a jump.
        let next = |m: &Alternative| {
            if m.gpus == g + 1 {
                format!("a {}", ordinal(m.gpus))
            } else {
                gpus(m.gpus)
            }
        };
        let adds = |m: &Alternative| match m.gain {
            Some(gain) if gain >= 0.0 => format!("{} would add {}", next(m), percent(gain)),
            Some(gain) => format!("{} would lose {}", next(m), percent(-gain)),
            None => format!("{} would be possible", next(m)),
        };
        let short = |m: &Alternative| (m.gpus - g).saturating_sub(self.free_gpus);
        match (self.state, &self.limit) {
            (None, _) | (_, Limit::Leaving) => {
                return f.write_str("being cancelled: not decided for")
            }
            (Some(JobState::Dropped), Limit::Dropped { need }) => {
                return write!(
                    f,
                    "dropped: its minimum of {} did not fit (admit-or-drop)",
                    gpus(*need)
                )
            }
            (Some(JobState::Running), _) => {}
            (_, limit) => {
                return match limit {
                    Limit::Admission { need, free } => write!(
                        f,
                        "queued: its minimum of {} does not fit ({} left beside the minimums of the jobs served first)",
                        gpus(*need),
                        gpus(*free)
                    ),
                    Limit::Fifo => f.write_str(
                        "queued: an earlier job waits, and without backfill the queue is first come, first served",
                    ),
                    Limit::TeamMax { team, max } => write!(
                        f,
                        "queued: its team, {team}, holds its maximum of {}",
                        gpus(*max)
                    ),
                    Limit::Guarantees => f.write_str(
                        "queued: the GPUs left are held for other teams' guarantees (their work within them comes first)",
                    ),
                    Limit::Room => f.write_str(
                        "queued: the GPUs it was given do not fit on the free GPUs of the nodes; it waits for room",
                    ),
                    Limit::Shape { rule } => write!(
                        f,
                        "queued: none of its GPU counts can be placed under the shape rule ({rule})"
                    ),
                    Limit::Unrunnable => f.write_str("queued: it cannot run on these GPUs"),
                    Limit::Policy { policy } => write!(f, "queued, as policy {policy} decides"),
                    _ => f.write_str("queued"),
                };
            }
        }
        let held = if self.limit.holds() { "held at" } else { "at" };
        write!(f, "{held} {}", gpus(g))?;
        match (&self.limit, &self.more) {
            (Limit::Largest { cap: Some(size) }, _) => {
                match self.types.as_ref().and_then(|t| t.gpu_type.as_ref()) {
                    Some(here) => write!(f, ", all the {here} GPUs there are")?,
                    None => write!(f, ", all {} of its type", gpus(*size))?,
                }
                f.write_str(": the type's size is the limit, not its GPU range")?
            }
            (Limit::Largest { .. }, _) | (_, None) => write!(
                f,
                ", the most it can use here (its GPU and batch ranges, memory and model allow no more)"
            )?,
            (Limit::Cooldown { until_s }, Some(m)) => write!(
                f,
                ": in its cooldown for {:.0} s more; {}",
                (until_s - self.at_s).max(0.0),
                adds(m)
            )?,
            (Limit::Finishing, _) => f.write_str(": less work is left than a restart costs")?,
            (Limit::UntilPeriodic { next_s }, Some(m)) => write!(
                f,
                ": decided on an event, which only starts waiting jobs; running jobs change at \
                 the next periodic decision, in {:.0} s; {}",
                (next_s - self.at_s).max(0.0),
                adds(m)
            )?,
            (Limit::TeamMax { team, max }, Some(m)) => write!(
                f,
                ": {} would take its team, {team}, past its maximum of {}",
                gpus(m.gpus),
                gpus(*max)
            )?,
            (Limit::Shape { rule }, Some(m)) => write!(
                f,
                ": {} cannot be placed under the shape rule ({rule})",
                gpus(m.gpus)
            )?,
            (Limit::Room, Some(m)) => write!(
                f,
                ": {} do not fit on the free GPUs of the nodes",
                gpus(m.gpus)
            )?,
            (Limit::Exploring { measured, cap }, Some(_)) => match measured {
                Some(n) => write!(
                    f,
                    ": not yet measured beyond {}; until it is, its learned model is trusted with \
                     at most {}",
                    gpus(*n),
                    gpus(*cap)
                )?,
                None => write!(
                    f,
                    ": not yet measured; until it reports, it runs on the {} it asks for",
                    gpus(*cap)
                )?,
            },
            (Limit::NoGain, Some(m)) => write!(f, ": {}, no speed-up", adds(m))?,
            (Limit::MinGain { min_gain }, Some(m)) => write!(
                f,
                ": {} (minimum gain {})",
                adds(m),
                percent(*min_gain)
            )?,
            (Limit::RestartCost { cost_s }, Some(m)) => write!(
                f,
                ": {}, less than a restart costs ({cost_s} s of progress)",
                adds(m)
            )?,
            (Limit::Capacity, Some(m)) => {
                write!(f, ": {} (value {:+.3}), but ", adds(m), m.value_change)?;
                match &self.donor {
                    Some(d) => write!(
                        f,
                        "{} would lose {}, which costs more (value {:+.3})",
                        d.id,
                        if short(m) == 1 { "it".to_string() } else { gpus(short(m)) },
                        d.value_change
                    )?,
                    None if self.free_gpus == 0 => {
                        f.write_str("no GPU is free and no other job can give one up")?
                    }
                    None => write!(
                        f,
                        "only {} free and no other job can give up {} more",
                        gpus(self.free_gpus),
                        short(m)
                    )?,
                }
            }
            (Limit::Policy { policy }, Some(_)) => write!(f, ", as policy {policy} decides")?,
            // Limits of jobs that wait: not for a running one.
            (_, Some(_)) => {}
        }
        if self.limit.holds() {
            if let (Some(d), Some(m)) = (&self.donor, &self.more) {
                let n = short(m);
                let lose = if n == 1 { "it".to_string() } else { gpus(n) };
                write!(f, "; {} would lose {lose}", d.id)?;
            }
        }
        if let Some(l) = &self.fewer {
            let which = if l.gpus + 1 == g {
                "one fewer".to_string()
            } else {
                gpus(l.gpus)
            };
            match l.gain {
                Some(gain) if gain <= 0.0 => write!(f, "; {which} would cost {}", percent(-gain))?,
                Some(gain) => write!(f, "; {which} would even gain {}", percent(gain))?,
                None => {}
            }
        }
        Ok(())
    }
}
