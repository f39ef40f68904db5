//! CronJobs: [`schedule`] reads cron schedules and finds their next times as upstream does.

pub mod schedule;
