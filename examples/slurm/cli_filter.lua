--[[
precision-doctor as the last gate before the queue: a SLURM cli_filter/lua plugin.

It runs inside `sbatch` on the submit host, as the user who submits. For `sbatch job.sbatch` it runs
`precision-doctor check job.sbatch` (the job script, the training script it launches and its config files)
and refuses the submission with the doctor's findings when one is an error. Everything else (srun, salloc,
`sbatch --wrap`, a script on stdin) passes unchecked, and so does any job when the doctor cannot run.

Install (admin):
  1. precision-doctor installed where users submit (or set PRECISION_DOCTOR to the command that runs it);
  2. this file as cli_filter.lua next to slurm.conf (e.g. /etc/slurm/cli_filter.lua);
  3. CliFilterPlugins=cli_filter/lua in slurm.conf (read by the client commands: no daemon restart).
Users override it for one submission with PRECISION_DOCTOR_SKIP=1 sbatch job.sbatch.
--]]

local DOCTOR = os.getenv("PRECISION_DOCTOR") or "precision-doctor"

local function command_line()
    local f = io.open("/proc/self/cmdline", "rb")
    if not f then
        return {}
    end
    local data = f:read("*a")
    f:close()
    local words = {}
    for word in string.gmatch(data, "([^%z]*)%z") do
        table.insert(words, word)
    end
    return words
end

local function shell_quote(text)
    return "'" .. string.gsub(text, "'", "'\\''") .. "'"
end

local function is_script(path)
    local f = io.open(path, "r")
    if not f then
        return false
    end
    local first = f:read("*l") or ""
    f:close()
    return string.sub(first, 1, 2) == "#!"
end

-- the batch script: the first word after sbatch's options that names a file starting with #!
local function batch_script(words)
    for i = 2, #words do
        local word = words[i]
        if string.sub(word, 1, 1) ~= "-" and is_script(word) then
            return word
        end
    end
    return nil
end

function slurm_cli_setup_defaults(options, early_pass)
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, pack_offset)
    local words = command_line()
    if #words == 0 or not string.match(words[1], "sbatch$") or os.getenv("PRECISION_DOCTOR_SKIP") == "1" then
        return slurm.SUCCESS
    end
    local script = batch_script(words)
    if script == nil then
        return slurm.SUCCESS
    end
    local pipe = io.popen(DOCTOR .. " check " .. shell_quote(script) ..
                          " --quiet --no-color --fail-on error 2>&1; echo \"precision-doctor-exit=$?\"")
    local out = pipe:read("*a")
    pipe:close()
    local code = tonumber(string.match(out, "precision%-doctor%-exit=(%d+)")) or 3
    out = string.gsub(out, "precision%-doctor%-exit=%d+%s*$", "")
    if code == 1 then
        io.stderr:write("sbatch: precision-doctor refused " .. script .. ": the job would fail\n" .. out ..
                        "\nFix it, or submit it anyway with PRECISION_DOCTOR_SKIP=1 sbatch ...\n")
        return slurm.ERROR
    end
    if code ~= 0 then
        io.stderr:write("sbatch: precision-doctor could not check " .. script .. " (exit " .. code ..
                        "); submitted unchecked\n" .. out)
    end
    return slurm.SUCCESS
end
