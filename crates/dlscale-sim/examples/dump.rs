use dlscale_sim::metrics::{JobRecord, SimObserver};
use dlscale_sim::workload::bundled_pollux_workload;
struct P;
impl SimObserver for P {
    fn job_finished(&mut self, r: &JobRecord) -> dlscale_sim::Result<()> {
        println!(
            "{} {} {:?} {:?} {}",
            r.id, r.arrival_s, r.start_s, r.finish_s, r.reallocations
        );
        Ok(())
    }
}
fn main() {
    let w: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let policy = std::env::args().nth(2).unwrap();
    let wl = bundled_pollux_workload(w).unwrap();
    let cfg = dlscale_sim::reproduce::pollux_config();
    let p = policy.parse::<dlscale_core::PolicyInfo>().unwrap();
    dlscale_sim::simulate(&wl, &cfg, p, &mut P).unwrap();
}
