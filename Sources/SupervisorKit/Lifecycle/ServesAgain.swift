import SupervisorCore

/// What a plugin's dependents hear when it serves (again), and the dependents it had failed that
/// get another go (`StartOrder.notices`).
extension Lifecycle {
    /// A new worker serves `record`'s calls (after a start, a restart or an update's switch): what
    /// waited goes to it, it hears `launch` if the others have, and its dependents hear it restarted.
    func servesAgain(_ record: PluginRecord, restarted: Bool) {
        effects.post(.forwardWaiting(record))
        // Dependents that could not start only because this plugin was down get another go; a
        // restarted plugin lost its state, so running dependents hear of it (or restart too).
        let notices = reviveDependents(of: record, restarted: restarted)
        if phase == .launched {
            // Every other plugin has long started: this one (restarted, or added by a rescan) hears so now.
            shared.sendEvent(record, .launch) { _ in }
            if !restarted { effects.post(.refreshResources(record)) }
        }
        for notice in notices {
            switch notice {
            case .retry, .awaitNeed: break
            case .restart(let id):
                if let inst = table[id]?.instance { kill(inst, .dependencyRestarted, "\(record.identifier) restarted (restartDependents)") }
            case .tell(let id):
                guard let dependent = table[id] else { continue }
                shared.sendEvent(dependent, .dependencyRestarted, payload: { $0.object("payload", ["identifier": .string(record.identifier)]) }) { _ in }
            }
        }
        startWaitingPlugins()
        keepStandbyLater(record)
    }

    /// `record` is up (it serves, or waits inactive to be needed): its dependents failed only by
    /// their dependencies, none of which is down any more, start again, or become inactive if they
    /// start on demand (and then, not down any more either, their own such dependents get
    /// another go). Returns the notices, for what else `record`'s dependents hear.
    @discardableResult
    func reviveDependents(of record: PluginRecord, restarted: Bool = false) -> [StartOrder.Notice] {
        let dependents = table.dependents(of: record.identifier).map { dependent in
            var facts = dependent.startFacts
            facts.onCall = config.activation(of: dependent.manifest) == .onCall
            return facts
        }
        let notices = StartOrder.notices(dependents: dependents, restarted: restarted,
                                         restartDependents: config.restartDependents, shuttingDown: isShuttingDown,
                                         lookup: { self.table[$0]?.startFacts })
        for notice in notices {
            switch notice {
            case .retry(let id):
                guard let dependent = table[id] else { continue }
                move(dependent, to: .waiting)
                dependent.problem = nil
            case .awaitNeed(let id):
                guard let dependent = table[id] else { continue }
                // Its own dependents get their go as it becomes inactive (`CarryOutLife`).
                effects.now(.life(dependent, dependent.life.awaitNeed()))
            case .tell, .restart: break
            }
        }
        return notices
    }
}
